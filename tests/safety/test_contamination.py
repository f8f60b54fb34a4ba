"""Evaluation items in training data are found, verbatim or lightly reformatted, with the
matching text as evidence; unrelated data and near-misses are not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evalsuite.registry import evaluation_items
from safety.contamination import contamination_index, scan_file
from safety.models import Finding
from safety.ngrams import tokens
from safety.services import audit_run
from tests.safety.conftest import ITEMS, make_agent, register_data

pytestmark = pytest.mark.django_db

UNRELATED = [
    {
        "prompt": "How do I cook pasta so it does not stick together?",
        "completion": "Use plenty of boiling salted water and stir during the first minute.",
    },
    {"prompt": "Which river flows through Paris?", "completion": "The Seine flows through Paris."},
]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_normalisation_ignores_case_punctuation_and_spacing():
    assert tokens("Which RIVER—flows\nthrough  'Quillmoor'?") == tokens(
        "which river flows through quillmoor"
    )
    assert tokens("snake_case 3.14") == ["snake", "case", "3", "14"]


def test_a_registered_data_file_with_evaluation_items_is_a_contamination_finding(root):
    ann = make_agent(root, "ann")
    data = jsonl(
        ann.sandbox / "sft.jsonl",
        [
            *UNRELATED,
            {
                "messages": [
                    {"role": "user", "content": ITEMS[0].prompt},
                    {"role": "assistant", "content": ITEMS[0].answer},
                ]
            },
        ],
    )
    register_data(ann, data)

    report = audit_run(items=ITEMS)

    finding = Finding.objects.get(agent=ann.agent, kind=Finding.Kind.CONTAMINATION)
    assert finding.severity == "high" and finding.status == "open" and finding.phase is None
    (match,) = finding.evidence["matches"]
    assert match["file"] == str(data) and match["line"] == 3
    assert match["item_id"] == "rq-1" and match["benchmark"] == "riverqa"
    assert match["coverage"] == 1.0
    assert "old city of Quillmoor" in match["text"] and "Port Anwen" in match["text"]
    assert finding.evidence["threshold"] == {"n": 8, "coverage_above": 0.5}
    assert report.created == [finding]


def test_lightly_reformatted_items_in_an_unregistered_sandbox_file_are_found(root):
    ben = make_agent(root, "ben")
    notes = ben.sandbox / "data" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text(
        "Some notes on rivers.\n\n"
        "Q: which river flows through the OLD city of quillmoor,\nin the northern valley of "
        "estria??\nA: the silverrun river flows through quillmoor...\n\n"
        "Unrelated paragraph about pasta.\n"
    )
    audit_run(items=ITEMS)

    finding = Finding.objects.get(agent=ben.agent, kind=Finding.Kind.CONTAMINATION)
    (match,) = finding.evidence["matches"]
    assert match["file"] == str(notes) and match["line"] == 3 and match["item_id"] == "rq-1"
    assert 0.5 < match["coverage"] <= 1.0


def test_held_out_items_count_too_and_make_the_finding_critical(root):
    cat = make_agent(root, "cat")
    shard = cat.sandbox / "math.jsonl.gz"
    with gzip.open(shard, "wt") as out:
        out.write(json.dumps({"text": ITEMS[2].prompt.upper() + " Answer: 27"}) + "\n")
    audit_run(items=ITEMS)

    finding = Finding.objects.get(agent=cat.agent, kind=Finding.Kind.CONTAMINATION)
    assert finding.severity == "critical" and finding.evidence["held_out_items"] == 1
    assert finding.evidence["matches"][0]["held_out"] is True


def test_unrelated_data_and_fragments_below_the_threshold_are_not_findings(root):
    dan = make_agent(root, "dan")
    register_data(dan, jsonl(dan.sandbox / "clean.jsonl", UNRELATED))
    # A third of the item's 8-grams: shared phrasing, not a copied item.
    words = ITEMS[1].prompt.split()
    (dan.sandbox / "fragment.txt").write_text(" ".join(words[:9]) + " is a question I like.\n")

    report = audit_run(items=ITEMS)

    assert not Finding.objects.exists()
    assert report.files_scanned == 2 and report.records_scanned == 3


def test_items_too_short_to_index_are_counted_and_short_prompts_match_whole():
    from evalsuite.registry import EvalItem

    index = contamination_index(
        [
            EvalItem("t", "short", "Capital of Estria?", "Quill", False),  # 3 tokens: too short
            EvalItem("t", "whole", "Name the capital of Estria", "Quillmoor", False),
        ]
    )
    assert index.unscannable == [("t", "short")]
    assert len(index) == 1


def test_the_default_index_is_every_registered_evaluation_item(root, tmp_path):
    item = next(i for i in evaluation_items() if len(tokens(i.prompt)) >= 12)
    eve = make_agent(root, "eve")
    (eve.sandbox / "train.txt").write_text(f"{item.prompt}\n{item.answer}\n")

    audit_run()

    finding = Finding.objects.get(agent=eve.agent, kind=Finding.Kind.CONTAMINATION)
    assert (item.benchmark, item.item_id) in {
        (m["benchmark"], m["item_id"]) for m in finding.evidence["matches"]
    }


def test_a_large_file_is_scanned_in_batches_and_the_line_is_right(tmp_path):
    rows = [{"text": f"filler line number {i} about nothing in particular"} for i in range(5000)]
    rows.insert(4321, {"text": ITEMS[1].prompt + " " + ITEMS[1].answer})
    scan = scan_file(contamination_index(ITEMS), jsonl(tmp_path / "big.jsonl", rows))
    assert scan.records == 5001 and scan.skipped == ""
    assert [(m.item_id, m.line) for m in scan.matches] == [("rq-2", 4322)]


def test_parquet_rows_are_records(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"prompt": ["hello there", ITEMS[0].prompt], "response": ["hi", ITEMS[0].answer]}
    )
    pq.write_table(table, tmp_path / "train.parquet")
    scan = scan_file(contamination_index(ITEMS), tmp_path / "train.parquet")
    assert [(m.item_id, m.line) for m in scan.matches] == [("rq-1", 2)]


def test_ascii_text_takes_a_shortcut_to_the_same_tokens():
    from safety.ngrams import _TOKEN, normalise

    for text in ["Snake_case ABC-12 x", '{"q": "WHAT  is 2 + 2"}', "tab\tnew\nline__x9 Ⅻ café"]:
        assert tokens(text) == _TOKEN.findall(normalise(text))
