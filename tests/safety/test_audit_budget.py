"""Each agent's files cost the audit its own budget (seconds, bytes read, entries walked), and
a JSON document is read as a stream of records, never parsed whole."""

from __future__ import annotations

import io
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from safety import budget as budget_module
from safety.budget import Budget, BudgetSpent
from safety.files import MAX_RECORD_CHARS, json_document_records
from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import ITEMS, make_agent

pytestmark = pytest.mark.django_db


def test_the_clock_of_a_paused_budget_does_not_run(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(budget_module.time, "monotonic", lambda: now[0])
    budget = Budget(seconds=10, bytes=1 << 30, entries=1000)
    now[0] += 6
    budget.pause()
    now[0] += 3600  # the other agents' scans
    budget.resume()
    budget.check()  # 6 s of 10 spent

    now[0] += 5
    with pytest.raises(BudgetSpent):
        budget.read(1)
    assert budget.limit == "seconds" and budget.elapsed() == pytest.approx(11)
    with pytest.raises(BudgetSpent):  # spent stays spent, whatever is charged next
        budget.entry("next")


@override_settings(SAFETY_AUDIT_AGENT_SECONDS=0)
def test_an_agent_with_no_time_left_is_reported_unread_not_cleared(root):
    ann = make_agent(root, "ann")
    (ann.sandbox / "train.txt").write_text(ITEMS[0].prompt + "\n" + ITEMS[0].answer + "\n")

    report = audit_run(items=ITEMS)

    (unread,) = Finding.objects.filter(agent=ann.agent)
    assert unread.kind == Finding.Kind.UNREAD_FILES and not unread.is_violation
    assert unread.evidence["limit"] == "seconds" and unread.evidence["files_read"] == 0
    assert unread.evidence["left_unread"] == [str(ann.sandbox)]
    assert unread.evidence["passes_cut"] == [
        "the contamination scan",
        "the hashes for the cross-agent comparison",
    ]
    assert report.files_scanned == 0


@override_settings(SAFETY_AUDIT_AGENT_BYTES="lots")
def test_a_budget_setting_that_is_no_number_stops_the_audit_loudly(root):
    make_agent(root, "ann")
    with pytest.raises(ImproperlyConfigured, match="SAFETY_AUDIT_AGENT_BYTES"):
        audit_run(items=ITEMS)


def records_of(document: object | str) -> list[tuple[int, str]]:
    text = document if isinstance(document, str) else json.dumps(document)
    return [(r.line, r.text) for r in json_document_records(io.BytesIO(text.encode()))]


def test_every_list_reached_through_objects_is_read_element_by_element():
    document = {
        "version": "2",
        "train": [{"q": "a", "n": 1.5e10, "ok": True}, "b"],
        "splits": {"test": [{"q": "c"}, [["d"]], {}]},
    }

    assert records_of(document) == [
        (1, "q\na\nn\n15000000000.0\nok"),
        (2, "b"),
        (3, "q\nc"),
        (4, "d"),
        (6, "version\n2\ntrain\nsplits\ntest"),  # element 5, {}, holds no text
    ]


def test_json_lines_in_a_json_file_are_a_record_each():
    assert records_of('{"a": "x"}\n{"b": "y"}\n') == [(1, "a\nx"), (2, "b\ny")]


def test_a_long_element_goes_on_in_the_next_record_instead_of_being_cut():
    found = records_of([{"t": "x" * (2 * MAX_RECORD_CHARS)}])

    assert [line for line, _ in found] == [1, 1, 1]
    assert "".join(text for _, text in found) == "t\n" + "x" * (2 * MAX_RECORD_CHARS)


def test_what_was_read_before_the_budget_ran_out_is_still_scanned(root):
    ann = make_agent(root, "ann")
    # Lines of a kilobyte: the first megabyte read is fewer records than a scan's batch.
    filler = "".join(json.dumps({"text": f"line {i} " + "word " * 200}) + "\n" for i in range(3000))
    row = json.dumps({"question": ITEMS[0].prompt, "answer": ITEMS[0].answer}) + "\n"
    (ann.sandbox / "train.jsonl").write_text(row + filler)

    with override_settings(SAFETY_AUDIT_AGENT_BYTES=3 * 1024**2 // 2):
        audit_run(items=ITEMS)

    kinds = {f.kind: f for f in Finding.objects.filter(agent=ann.agent)}
    assert set(kinds) == {Finding.Kind.CONTAMINATION, Finding.Kind.UNREAD_FILES}
    assert kinds[Finding.Kind.UNREAD_FILES].evidence["limit"] == "bytes"
    assert kinds[Finding.Kind.UNREAD_FILES].evidence["stopped_at"].endswith("train.jsonl")
