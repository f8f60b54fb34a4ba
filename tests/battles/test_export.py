import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from arena.battles.export import ExportFormatError, read_battle_export
from arena.battles.models import Answer
from arena.battles.services import vote_record
from arena.battles.style import STYLE_VERSION
from tests import factories

pytestmark = pytest.mark.django_db


def voted_battle(choice, *, a, b, void_reason="", texts=("## Hi\n- **x**", "plain")):
    battle = factories.complete_battle(a=a, b=b, void_reason=void_reason, texts=texts)
    Answer.objects.filter(battle=battle, side="a").update(
        tokens=7,
        header_counts={"h1": 0, "h2": 1, "h3": 0, "h4": 0, "h5": 0, "h6": 0},
        list_counts={"ordered": 0, "unordered": 1},
        bold_counts={"**": 1, "__": 0},
    )
    vote_record(battle_id=battle.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip")
    return battle


def test_the_export_round_trips_through_the_contract_reader(tmp_path):
    left, right = factories.contestant("left"), factories.contestant("right")
    counted = [voted_battle(c, a=left, b=right) for c in ("a", "b", "tie", "bothbad")]
    voted_battle("a", a=left, b=right, void_reason="answer A revealed a model identity")
    out = tmp_path / "battles.jsonl"

    call_command("battles", "export", "--out", str(out))

    records = read_battle_export(out, require_style=True)
    assert [r.battle_id for r in records] == [b.pk for b in counted]  # void battle left out
    assert [r.winner for r in records] == ["model_a", "model_b", "tie", "tie (bothbad)"]
    first = records[0]
    assert (first.model_a, first.model_b) == ("left", "right")
    assert first.style_a.tokens == 7
    assert first.style_a.headers["h2"] == 1
    assert first.style_a.lists == {"ordered": 0, "unordered": 1}
    assert first.style_a.bold == {"**": 1, "__": 0}
    assert first.judge == factories.voter_key() and "voter-1" not in out.read_text()
    assert first.raw["conversation_a"][1] == {"role": "assistant", "content": "## Hi\n- **x**"}


def test_the_reader_names_the_line_of_a_bad_record(tmp_path):
    good = {"model_a": "x", "model_b": "y", "winner": "model_a"}
    cases = [
        ({**good, "winner": "model_c"}, "unknown winner 'model_c'"),
        ({**good, "model_b": "x"}, "against itself"),
        ({"model_a": "x", "winner": "tie"}, "missing or empty 'model_b'"),
        (good, "no style metadata"),
        (
            {**good, "conv_metadata": {**_style(), "sum_assistant_a_tokens": True}},
            "sum_assistant_a_tokens must be a non-negative integer",
        ),
        (
            {**good, "conv_metadata": {**_style(), "bold_count_b": {"**": 1.5, "__": 0}}},
            r"bold_count_b\['\*\*'\] must be a non-negative integer",
        ),
        ({**good, "conv_metadata": _style(), "tstamp": False}, "tstamp False is not a number"),
    ]
    for row, message in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text(
            json.dumps(good | {"conv_metadata": _style()}) + "\n" + json.dumps(row) + "\n"
        )
        with pytest.raises(ExportFormatError, match=f"line 2: .*{message}"):
            read_battle_export(path, require_style=True)


def test_a_chatbot_arena_style_line_without_our_extra_fields_is_read(tmp_path):
    path = tmp_path / "public.jsonl"
    row = {
        "question_id": "q1",
        "model_a": "m1",
        "model_b": "m2",
        "winner": "tie (bothbad)",
        "tstamp": 1700000000.5,
        "judge": "arena_user_1",
        "conv_metadata": _style(),
    }
    path.write_text(json.dumps(row) + "\n")
    [record] = read_battle_export(path, require_style=True)
    assert record.battle_id == "q1"
    assert record.style_b.tokens == 5


def test_whole_numbers_written_as_floats_are_counts(tmp_path):
    path = tmp_path / "floats.jsonl"
    metadata = {**_style(), "sum_assistant_a_tokens": 12.0, "list_count_a": {"ordered": 2.0}}
    row = {"model_a": "m1", "model_b": "m2", "winner": "model_b", "conv_metadata": metadata}
    path.write_text(json.dumps(row) + "\n")
    [record] = read_battle_export(path, require_style=True)
    assert record.style_a.tokens == 12 and type(record.style_a.tokens) is int
    assert record.style_a.lists == {"ordered": 2, "unordered": 0}


def test_each_line_names_its_style_rules_and_a_row_counted_under_old_rules_is_recounted(
    tmp_path,
):
    left, right = factories.contestant("left"), factories.contestant("right")
    text_a = "Title\n===\n> - quoted item\n\nPass `**kwargs**` on."
    battle = factories.complete_battle(a=left, b=right, texts=(text_a, "plain"))
    # Side A as a worker still running the line regexes (version 1) stored it during an upgrade.
    Answer.objects.filter(battle=battle, side="a").update(
        style_version=1,
        tokens=13,
        header_counts={f"h{i}": 0 for i in range(1, 7)},
        list_counts={"ordered": 0, "unordered": 0},
        bold_counts={"**": 1, "__": 0},
    )
    vote_record(battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip")
    out = tmp_path / "battles.jsonl"

    call_command("battles", "export", "--out", str(out))

    [record] = read_battle_export(out, require_style=True)
    assert record.raw["conv_metadata"]["style_version"] == STYLE_VERSION == 2
    assert record.style_a.headers["h1"] == 1
    assert record.style_a.lists == {"ordered": 0, "unordered": 1}
    assert record.style_a.bold == {"**": 0, "__": 0}
    assert record.style_b.tokens == 3  # side B was stored under the current rules: as stored


def test_ratings_read_an_export_the_same_with_or_without_its_style_version(tmp_path):
    players = [factories.contestant(name) for name in ("ann", "bob", "cat")]
    for i in range(30):
        texts = ("## Plan\n" + "- **step**\n" * (i % 4), "Plain words. " * (1 + i % 5))
        _leaky_battle(
            texts, a=players[i % 3], b=players[(i + 1) % 3], choice="b" if i % 4 == 0 else "a"
        )
    # Recorded answers are stored under the current rules, so the export takes them as stored.
    assert set(Answer.objects.values_list("style_version", flat=True)) == {STYLE_VERSION}
    ours, older = tmp_path / "ours.jsonl", tmp_path / "older.jsonl"
    call_command("battles", "export", "--out", str(ours))
    rows = [json.loads(line) for line in ours.read_text().splitlines()]
    for row in rows:
        del row["conv_metadata"]["style_version"]
    older.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def ratings(path):
        out = io.StringIO()
        call_command("ratings", "--votes", str(path), "--json", "--bootstrap", "10", stdout=out)
        return json.loads(out.getvalue())

    fitted = ratings(ours)
    assert fitted["n_battles"] == 30 and fitted["method"] == "style-controlled bradley-terry"
    assert ratings(older) == fitted


def test_export_into_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        call_command("battles", "export", "--out", str(tmp_path / "nope" / "x.jsonl"))


def _style():
    side = {
        "header": {f"h{i}": 0 for i in range(1, 7)},
        "list": {"ordered": 0, "unordered": 0},
        "bold": {"**": 0, "__": 0},
    }
    return {
        "sum_assistant_a_tokens": 4,
        "sum_assistant_b_tokens": 5,
        "header_count_a": side["header"],
        "header_count_b": side["header"],
        "list_count_a": side["list"],
        "list_count_b": side["list"],
        "bold_count_a": side["bold"],
        "bold_count_b": side["bold"],
    }


def _leaky_battle(texts, *, a, b, choice="a"):
    """A battle recorded through the identity check, then voted `choice`."""
    from arena.battles.models import Battle
    from arena.battles.services import SideResult, battle_record_answers

    battle = factories.complete_battle(a=a, b=b, state=Battle.State.GENERATING)
    results = {
        side: SideResult(text, "stop", "", 0.1, 0.2) for side, text in zip("ab", texts, strict=True)
    }
    battle = battle_record_answers(battle_id=battle.pk, results=results)
    read_at = timezone.now() - timedelta(minutes=5)  # the voter read both answers long ago
    Battle.objects.filter(pk=battle.pk).update(completed_at=read_at)
    vote_record(battle_id=battle.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip")
    return battle


def test_a_side_that_leaks_loses_in_the_export_and_the_fit_input(tmp_path):
    from arena.leaderboard.inputs import counted_battles

    left, right = factories.contestant("left"), factories.contestant("right")
    leaked = _leaky_battle(("I am left, the best.", "4."), a=left, b=right, choice="a")
    assert (leaked.leaked_sides, leaked.void_reason) == ("a", "")
    out = tmp_path / "battles.jsonl"

    call_command("battles", "export", "--out", str(out))

    (record,) = read_battle_export(out, require_style=True)
    assert record.winner == "model_b"  # the voter chose A, but A named itself
    assert record.raw["conv_metadata"]["leaked_side"] == "a"
    assert record.raw["conv_metadata"]["vote"] == "a"
    battles, _ = counted_battles()
    assert battles is not None and battles.n_battles == 1
    assert battles.models[battles.a[0]] == "left" and battles.outcome[0] == 0.0  # B won


def test_a_battle_where_both_sides_leak_is_void(tmp_path):
    from arena.leaderboard.inputs import counted_battles

    left, right = factories.contestant("left"), factories.contestant("right")
    both = _leaky_battle(("I am left.", "I am right."), a=left, b=right)
    assert both.leaked_sides == "ab" and both.void_reason
    out = tmp_path / "battles.jsonl"
    call_command("battles", "export", "--out", str(out))
    assert read_battle_export(out) == []
    assert counted_battles() == (None, None)
