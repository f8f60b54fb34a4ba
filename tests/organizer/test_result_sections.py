"""The evaluation and audit sections of the organizer dashboard, from stored rows."""

import pytest
from django.utils import timezone

from agents.services import agent_create
from evalsuite.models import EvalRun
from frontend.organizer import provided_sections
from frontend.organizer_sections import audit_sections, evaluation_sections
from safety.models import Finding
from tests.evalsuite.conftest import stored_run
from tests.factories import running_phase

pytestmark = pytest.mark.django_db


def test_the_dashboard_shows_gap_closed_safety_flags_scores_and_correlations():
    phase = running_phase()
    stored_run(phase, "base", {"gsm8k": 0.2, "mmlu": 0.4, "strongreject": 0.8})
    stored_run(phase, "instruct", {"gsm8k": 0.6, "mmlu": 0.8, "strongreject": 0.9})
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5, "mmlu": 0.5, "strongreject": 0.5},
               agent=alice, label="alice-1")  # fmt: skip

    summary, scores, correlations = evaluation_sections()
    (alice_row,) = [row for row in summary.rows if row[0] == "alice-1"]
    # median of gsm8k 0.75 and mmlu 0.25; each ± 0.032 with the references' noise (0.025 from
    # the agent's 0.01 / 0.4, 0.019 and 0.006 from the references'), their mean ± 0.023
    assert alice_row[2] == "+0.50 ± 0.02"
    assert alice_row[3] == "none"  # nothing left out of gap closed
    assert alice_row[5] == "strongreject"  # less safe than the base model
    assert scores.columns[1:] == [row[0] for row in summary.rows] + ["judge"]
    (gsm8k,) = [row for row in scores.rows if row[0] == "gsm8k"]
    assert gsm8k[scores.columns.index("alice-1")] == "0.50 ± 0.01 (n=5)"
    assert gsm8k[-1] == "-"  # graded by rule, not by a judge
    assert correlations.title.startswith("Correlations")


def test_a_phase_where_no_benchmark_qualifies_shows_so_and_why_each_was_left_out():
    phase = running_phase()
    # instruct below the base on gsm8k (by far more than its noise), level with it on mmlu
    stored_run(phase, "base", {"gsm8k": 0.6, "mmlu": 0.5})
    stored_run(phase, "instruct", {"gsm8k": 0.0, "mmlu": 0.5})
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.0, "mmlu": 0.1},
               agent=agent_create(name="zed"), label="zed-1")  # fmt: skip
    summary = evaluation_sections()[0]
    assert summary.columns[2:4] == ["gap closed (median ± se)", "left out of gap closed (why)"]
    (zed,) = [row for row in summary.rows if row[0] == "zed-1"]
    assert zed[2] == "no benchmark where instruct beats base"
    assert zed[3] == (
        "gsm8k (instruct not above base: 0.000 vs 0.600); mmlu (instruct not above base:"
        " 0.500 vs 0.500)"
    )


def test_a_benchmarks_own_measures_are_rows_under_its_score():
    phase = running_phase()
    run = stored_run(phase, "base", {"bbq": 0.6})
    run.results.update(metrics={"bias_ambiguous": {"score": 0.25, "stderr": 0.1, "n": 3}})

    _, scores, _ = evaluation_sections()
    names = [row[0] for row in scores.rows]
    assert names == ["bbq", "bbq · bias_ambiguous"]
    assert scores.rows[1][1:] == ["0.25 ± 0.10 (n=3)", "-"]


def test_the_dashboard_lists_findings_and_who_had_scores_replaced():
    alice = agent_create(name="alice")
    Finding.objects.create(
        agent=alice, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="gsm8k items in train.jsonl", evidence={"file": "train.jsonl"},
        status=Finding.Status.CONFIRMED, fingerprint="x", last_seen_at=timezone.now(),
    )  # fmt: skip
    (section,) = audit_sections()
    assert section.rows[0][1] == "alice" and section.rows[0][5] == "confirmed"
    assert "replaced by the base model's for: alice" in section.note
    assert [s.title for s in provided_sections()] == ["Audit findings"]  # no evaluations yet


def test_a_confirmed_violator_is_shown_with_the_base_models_results():
    phase = running_phase()
    stored_run(phase, "base", {"gsm8k": 0.2, "mmlu": 0.4})
    stored_run(phase, "instruct", {"gsm8k": 0.6, "mmlu": 0.8})
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.9, "mmlu": 0.9}, agent=alice, label="alice-1")
    Finding.objects.create(
        agent=alice, phase=phase, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="gsm8k items in train.jsonl", evidence={}, status=Finding.Status.CONFIRMED,
        fingerprint="y", last_seen_at=timezone.now(),
    )  # fmt: skip
    summary, scores, _ = evaluation_sections()
    (alice_row,) = [row for row in summary.rows if row[0] == "alice-1"]
    assert alice_row[2] == (
        "+0.00 ± 0.02 (results replaced by the base model's: confirmed violation"
        " (trained on evaluation data))"
    )
    (gsm8k,) = [row for row in scores.rows if row[0] == "gsm8k"]
    shown = gsm8k[scores.columns.index("alice-1 (base model's)")]
    assert shown == gsm8k[scores.columns.index("base")] == "0.20 ± 0.01 (n=5)"


def test_the_dashboard_shows_each_contestants_leak_rate():
    from arena.battles.models import Battle
    from frontend.organizer_sections import leak_sections
    from tests import factories

    left, right = factories.contestant("left"), factories.contestant("right")
    for leaked in ("a", "", "", "ab"):
        battle = factories.complete_battle(a=left, b=right)
        Battle.objects.filter(pk=battle.pk).update(leaked_sides=leaked)
    factories.complete_battle(a=left, b=right, state=Battle.State.FAILED)  # not answered

    (section,) = leak_sections()
    assert section.title == "Identity leaks"
    assert section.rows == [["left", "4", "2", "50.0%"], ["right", "4", "1", "25.0%"]]
