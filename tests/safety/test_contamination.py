"""Evaluation items in training data are found, verbatim or lightly reformatted, with the
matching text as evidence; unrelated data and near-misses are not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evalsuite.registry import EvalItem, evaluation_items
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


NON_ASCII_ITEM = EvalItem(
    "unicode",
    "u-1",
    "Quelle rivière traverse la vieille cité de Québec près du château Frontenac?",
    "Le fleuve Saint-Laurent coule devant la Straße ﬁnale, « très » calme.",
    held_out=False,
)


def test_scan_tokens_are_the_normalised_tokens_of_every_kind_of_text(monkeypatch):
    from safety import ngrams
    from safety.ngrams import token_hashes

    texts = [
        "Snake_case ABC-12 x",
        '{"q": "WHAT  is 2 + 2"}',
        "tab\tnew\nline__x9 Ⅻ café",
        "ﬁne Straße ÉCOLE “quoted” 東京タワー 123 e\u0301",
        "a lone \ud800 surrogate and a \x00 nul",
        "",
        "  \n ",
        "x" * 70_000,
    ]
    hashes, bounds = token_hashes(texts)
    for number, text in enumerate(texts):
        words = tokens(text)
        alone = [token_hashes([word])[0][0] for word in words]
        assert hashes[bounds[number] : bounds[number + 1]].tolist() == alone
    assert len(set(token_hashes(["ab ba a b abab"])[0].tolist())) == 5
    # Hashed in slices of 100 bytes (one token, 70,000 bytes long, is a slice of its own).
    monkeypatch.setattr(ngrams, "BATCH_BYTES", 100)
    sliced, sliced_bounds = token_hashes(texts)
    assert sliced.tolist() == hashes.tolist() and sliced_bounds.tolist() == bounds.tolist()


def test_json_escapes_and_non_ascii_text_do_not_hide_an_item(tmp_path):
    index = contamination_index([*ITEMS, NON_ASCII_ITEM])
    item = NON_ASCII_ITEM
    path = tmp_path / "escaped.jsonl"
    # json.dumps escapes every non-ASCII character (\u00e8) and the newline put in the answer.
    rows = [
        {"prompt": item.prompt.upper(), "answer": item.answer.replace(" ", "\n", 3)},
        {"text": ITEMS[0].prompt.replace(" ", "\t") + "\n" + ITEMS[0].answer},
        {"text": "Quelle rivière? " * 30},  # the words, not the item
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert "\\u00e8" in path.read_text() and "\\n" in path.read_text()

    scan = scan_file(index, path)

    assert [(m.item_id, m.line) for m in scan.matches] == [("u-1", 1), ("rq-1", 2)]
    assert scan.matches[0].coverage == 1.0 and "RIVIÈRE" in scan.matches[0].text


def test_items_at_the_edges_of_a_tokenising_batch_are_found(tmp_path, monkeypatch):
    from safety import ngrams

    monkeypatch.setattr(ngrams, "BATCH_BYTES", 2_000)  # many small batches over 40 records
    filler = [{"text": f"filler record {i} " + "about nothing much " * 6} for i in range(40)]
    rows = list(filler)
    rows[0] = {"text": ITEMS[0].prompt + " " + ITEMS[0].answer}
    for place in (13, 14, 39):  # a batch holds about 14 of these records
        rows[place] = {"text": ITEMS[1].prompt + " " + ITEMS[1].answer}
    scan = scan_file(contamination_index(ITEMS), jsonl(tmp_path / "edges.jsonl", rows))
    assert [(m.item_id, m.line) for m in scan.matches] == [
        ("rq-1", 1),
        ("rq-2", 14),
        ("rq-2", 15),
        ("rq-2", 40),
    ]


def test_no_gram_joins_the_end_of_one_record_to_the_next(tmp_path):
    # rq-1: a prompt of 15 tokens (8 grams) and an answer of 13 (6 grams). Split after the
    # prompt's 14th token, the first record holds 7 of the 14 grams and the second the
    # answer's 6; the prompt's last gram lies across the two and is in neither.
    words = (ITEMS[0].prompt + " " + ITEMS[0].answer).split()
    rows = [{"text": " ".join(words[:14])}, {"text": " ".join(words[14:])}]
    scan = scan_file(contamination_index(ITEMS), jsonl(tmp_path / "split.jsonl", rows))
    assert [(m.line, m.coverage) for m in scan.matches] == [(1, 7 / 14), (2, 6 / 14)]


def test_json_nested_past_the_recursion_limit_is_read_as_text_not_a_crash(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(
        "[" * 5000
        + "]" * 5000
        + "\n"
        + json.dumps({"a": [[[[ITEMS[0].prompt]]]], "b": "\ud800 " + ITEMS[0].answer})
        + "\n"
    )
    scan = scan_file(contamination_index(ITEMS), path)
    assert scan.skipped == "" and scan.records == 2
    assert [(m.item_id, m.line) for m in scan.matches] == [("rq-1", 2)]
