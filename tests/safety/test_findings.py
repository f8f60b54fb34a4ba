"""Findings are kept across re-runs, changed only by organizers, shown on the dashboard, and a
confirmed violation replaces the agent's benchmark results with the base model's."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evalsuite.registry import evaluation_items
from safety.models import Finding
from safety.ngrams import tokens
from safety.selectors import benchmark_scores_after_audit, findings_for_dashboard
from safety.services import audit_run, finding_record, finding_set_status
from tests.safety.conftest import ITEMS, make_agent

pytestmark = pytest.mark.django_db

SCORES = {"ann": {"gsm8k": 0.61, "mmlu": 0.55}, "ben": {"gsm8k": 0.40, "mmlu": 0.47}}
BASE = {"gsm8k": 0.20, "mmlu": 0.30}


def contaminate(made, name="train.txt"):
    (made.sandbox / name).write_text(ITEMS[0].prompt + "\n" + ITEMS[0].answer + "\n")


def test_a_rerun_with_the_same_evidence_keeps_one_finding_and_its_status(root):
    ann = make_agent(root, "ann")
    contaminate(ann)
    first = audit_run(items=ITEMS)
    (finding,) = first.created
    finding_set_status(finding=finding, status="confirmed", note="verified by hand")

    second = audit_run(items=ITEMS)

    assert second.created == [] and [f.pk for f in second.refreshed] == [finding.pk]
    finding.refresh_from_db()
    assert finding.status == "confirmed" and finding.note == "verified by hand"
    assert finding.last_seen_at > finding.created_at
    # New evidence (another item in another file) is a new finding.
    (ann.sandbox / "more.txt").write_text(ITEMS[1].prompt + "\n")
    assert len(audit_run(items=ITEMS).created) == 1 and Finding.objects.count() == 2


def test_a_confirmed_violation_replaces_the_agents_results_with_the_base_models(root, phase):
    ann, _ = make_agent(root, "ann"), make_agent(root, "ben")
    finding, _ = finding_record(
        agent=ann.agent, kind="contamination", severity="high", summary="s", evidence={}, key="k"
    )
    assert benchmark_scores_after_audit(SCORES, BASE) == SCORES  # open: nothing changes yet

    finding_set_status(finding=finding, status="confirmed")
    after = benchmark_scores_after_audit(SCORES, BASE, phase=phase)
    assert after == {"ann": BASE, "ben": SCORES["ben"]}
    assert SCORES["ann"] == {"gsm8k": 0.61, "mmlu": 0.55}  # the input is not changed

    finding_set_status(finding=finding, status="dismissed")
    assert benchmark_scores_after_audit(SCORES, BASE) == SCORES


def test_only_violations_of_the_phase_in_question_replace_results(root, phase):
    ann = make_agent(root, "ann")
    card, _ = finding_record(
        agent=ann.agent,
        kind="model_card",
        severity="medium",
        summary="card",
        evidence={},
        key="card",
        phase=phase,
    )
    finding_set_status(finding=card, status="confirmed")
    assert benchmark_scores_after_audit(SCORES, BASE) == SCORES  # a wrong card is no violation

    other = phase.competition.phases.create(
        number=2,
        label="phase-2",
        starts_at=phase.ends_at,
        ends_at=phase.ends_at + (phase.ends_at - phase.starts_at),
    )
    swap, _ = finding_record(
        agent=ann.agent,
        kind="model_substitution",
        severity="critical",
        summary="swap",
        evidence={},
        key="swap",
        phase=other,
    )
    finding_set_status(finding=swap, status="confirmed")
    assert benchmark_scores_after_audit(SCORES, BASE, phase=phase) == SCORES
    assert benchmark_scores_after_audit(SCORES, BASE, phase="phase-2")["ann"] == BASE
    assert benchmark_scores_after_audit(SCORES, BASE)["ann"] == BASE


def test_the_dashboard_lists_open_findings_first_by_severity(root, phase):
    ann = make_agent(root, "ann")
    low, _ = finding_record(
        agent=ann.agent,
        kind="model_card",
        severity="low",
        summary="low",
        evidence={},
        key="1",
        phase=phase,
    )
    high, _ = finding_record(
        agent=ann.agent,
        kind="contamination",
        severity="high",
        summary="high",
        evidence={"file": "x"},
        key="2",
    )
    done, _ = finding_record(
        agent=ann.agent, kind="judge", severity="critical", summary="done", evidence={}, key="3"
    )
    finding_set_status(finding=done, status="confirmed")

    board = findings_for_dashboard(phase)

    assert [r["summary"] for r in board["findings"]] == ["high", "low", "done"]
    assert board["counts"] == {"open": 2, "confirmed": 1, "dismissed": 0}
    assert board["replaced_agents"] == ["ann"]
    row = board["findings"][0]
    assert row["agent"] == "ann" and row["phase"] is None and row["evidence"] == {"file": "x"}
    assert row["kind_label"] == "trained on evaluation data" and row["violation"] is True


def test_the_audit_command_runs_lists_and_confirms(root):
    ann = make_agent(root, "ann")
    make_agent(root, "ben")
    item = next(i for i in evaluation_items() if len(tokens(i.prompt)) >= 12)
    (ann.sandbox / "train.txt").write_text(f"{item.prompt}\n{item.answer}\n")

    out = StringIO()
    call_command("audit", "run", "--agent", "ann", "--no-judge", stdout=out)
    text = out.getvalue()
    assert "audit of 1 agent(s)" in text and "[ann] files" in text
    assert "new finding" in text and "done: 1 files" in text

    finding = Finding.objects.get()
    listed = StringIO()
    call_command("audit", "list", "--json", stdout=listed)
    assert [r["id"] for r in json.loads(listed.getvalue())["findings"]] == [finding.pk]

    call_command("audit", "confirm", str(finding.pk), "--note", "copied", stdout=StringIO())
    finding.refresh_from_db()
    assert finding.status == "confirmed" and finding.note == "copied"
    table = StringIO()
    call_command("audit", "list", stdout=table)
    assert (
        "confirmed" in table.getvalue()
        and "replaced by the base model's for: ann" in table.getvalue()
    )

    with pytest.raises(CommandError, match="no agent called zed"):
        call_command("audit", "run", "--agent", "zed", "--no-judge", stdout=StringIO())


def test_organizers_confirm_findings_in_the_admin(root, admin_client):
    ann = make_agent(root, "ann")
    finding, _ = finding_record(
        agent=ann.agent,
        kind="contamination",
        severity="high",
        summary="items in train.txt",
        evidence={},
        key="k",
    )
    page = admin_client.get("/admin/safety/finding/")
    assert page.status_code == 200 and b"items in train.txt" in page.content
    admin_client.post(
        "/admin/safety/finding/", {"action": "confirm", "_selected_action": [finding.pk]}
    )
    finding.refresh_from_db()
    assert finding.status == "confirmed"
