"""The columnar readers give the fit exactly what the record-by-record path gave it."""

import json
import random

import numpy as np
import pytest

from arena.battles.export import ExportFormatError, read_battle_export
from arena.battles.models import Answer, Battle, Vote, VoterExclusion
from arena.leaderboard.export_reader import battle_columns_from_file
from arena.leaderboard.inputs import (
    battles_from_file,
    battles_from_records,
    counted_battles,
    counted_battles_row_by_row,
)
from arena.rating import fit_ratings
from tests import factories

WINNERS = ["model_a", "model_b", "tie", "tie (bothbad)"]


def side_counts(rng, side, *, plain):
    """One side's style metadata; not `plain`: the other shapes the format allows (a count
    written as 5.0, keys left out, keys we do not read)."""
    headers = {f"h{i}": rng.randrange(3) for i in range(1, 7)}
    lists = {"ordered": rng.randrange(4), "unordered": rng.randrange(4)}
    bold = {"**": rng.randrange(3), "__": rng.randrange(2)}
    tokens = rng.randrange(400)
    if not plain:
        headers = {k: v for k, v in headers.items() if v}  # zeros left out
        lists["ordered"] = float(lists["ordered"])
        bold["~~"] = 7  # not a bold key: ignored
    return {
        f"sum_assistant_{side}_tokens": tokens,
        f"header_count_{side}": headers,
        f"list_count_{side}": lists,
        f"bold_count_{side}": bold,
    }


def write_export(path, n=3000, seed=5):
    rng = random.Random(seed)
    models = [f"model-{i:02d}" for i in range(12)]
    with path.open("w") as out:
        for i in range(n):
            a, b = rng.sample(models, 2)
            plain = rng.random() < 0.8
            row = {
                "battle_id": f"b{i}",
                "model_a": a,
                "model_b": b,
                "winner": rng.choice(WINNERS),
                "tstamp": 1700000000 + i if plain else 1700000000.5 + i,
                "judge": "j",
                "conv_metadata": {
                    **side_counts(rng, "a", plain=plain),
                    **side_counts(rng, "b", plain=plain),
                },
            }
            out.write(json.dumps(row) + ("\n\n" if i % 500 == 499 else "\n"))  # blank lines too
    return path


def assert_same_battles(new, old):
    assert new.models == old.models
    for name in ("a", "b", "outcome", "style", "weight"):
        np.testing.assert_array_equal(getattr(new, name), getattr(old, name), err_msg=name)


@pytest.mark.parametrize("style", [True, False])
def test_the_streaming_reader_gives_the_fit_what_the_records_gave_it(tmp_path, style):
    path = write_export(tmp_path / "v.jsonl")
    new = battles_from_file(path, style=style)
    old = battles_from_records(read_battle_export(path, require_style=style), style=style)
    if not style:
        old = old.without_style()  # the command fits a raw file without style either way
        new = new.without_style()

    assert_same_battles(new, old)
    assert new.n_battles == 3000
    new_fit = fit_ratings(new, style=style, bootstrap_rounds=10, seed=2)
    old_fit = fit_ratings(old, style=style, bootstrap_rounds=10, seed=2)
    assert new_fit.to_json() == old_fit.to_json()


def bad_file(tmp_path, line: bytes, before=3):
    path = write_export(tmp_path / "bad.jsonl", n=before)
    with path.open("ab") as out:
        out.write(line + b"\n")
    return path


def test_a_line_longer_than_the_bound_is_refused_naming_it_without_parsing_it(tmp_path):
    huge = json.dumps({"model_a": "x", "model_b": "y", "winner": "tie", "pad": "z" * 5000})
    path = bad_file(tmp_path, huge.encode())

    with pytest.raises(ExportFormatError, match=r"^line 4: longer than 4,096 bytes$"):
        battle_columns_from_file(path, style=False, max_line_bytes=4096)
    # A line exactly at the bound is read.
    exact = tmp_path / "exact.jsonl"
    line = json.dumps({"model_a": "x", "model_b": "y", "winner": "tie"})
    exact.write_text(f"{line}\n{line}")
    columns = battle_columns_from_file(exact, style=False, max_line_bytes=len(line))
    assert columns.names == ["x", "y"] and columns.a.shape == (2,)


def test_bytes_that_are_not_utf8_are_refused_naming_the_line(tmp_path):
    path = bad_file(tmp_path, b'{"model_a": "\xff", "model_b": "y", "winner": "tie"}')
    with pytest.raises(ExportFormatError, match=r"^line 4: not UTF-8$"):
        battle_columns_from_file(path, style=False)


@pytest.mark.parametrize(
    "row",
    [
        "not json",
        [1, 2],
        {"model_a": "x", "model_b": "y", "winner": "x"},
        {"model_a": "x", "model_b": "x", "winner": "tie"},
        {"model_a": "", "model_b": "x", "winner": "tie"},
        {"model_a": "x", "model_b": "y", "winner": "tie"},  # no style metadata
        {"model_a": "x", "model_b": "y", "winner": "tie", "tstamp": True},
        {
            "model_a": "x",
            "model_b": "y",
            "winner": "tie",
            "conv_metadata": {"sum_assistant_a_tokens": 3, "sum_assistant_b_tokens": -1},
        },
        {
            "model_a": "x",
            "model_b": "y",
            "winner": "tie",
            "conv_metadata": {
                **side_counts(random.Random(1), "a", plain=True),
                **side_counts(random.Random(1), "b", plain=True),
                "bold_count_b": {"**": True},
            },
        },
    ],
)
def test_a_bad_line_gets_the_error_the_record_parser_gives(tmp_path, row):
    line = row if isinstance(row, str) else json.dumps(row)
    path = bad_file(tmp_path, line.encode())
    with pytest.raises(ExportFormatError) as old:
        read_battle_export(path, require_style=True)
    with pytest.raises(ExportFormatError) as new:
        battle_columns_from_file(path, style=True)
    assert str(new.value) == str(old.value) and new.value.line == 4


def test_a_count_too_large_for_a_float_is_refused_naming_the_line(tmp_path):
    metadata = {
        **side_counts(random.Random(1), "a", plain=True),
        **side_counts(random.Random(1), "b", plain=True),
        "sum_assistant_b_tokens": 10**400,
    }
    row = {"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": metadata}
    path = bad_file(tmp_path, json.dumps(row).encode())
    with pytest.raises(ExportFormatError, match=r"^line 4: a style count is too large$"):
        battle_columns_from_file(path, style=True)


STYLED = json.dumps(
    {
        **side_counts(random.Random(3), "a", plain=True),
        **side_counts(random.Random(4), "b", plain=True),
    }
)[1:-1]  # the metadata's fields, to splice into hand-written lines
# Lines the fast decoder refuses or must read just as the standard parser does: each is
# valid for the reference parser, and the columns must come out the same.
UNUSUAL_VALID_LINES = [
    line.replace("@STYLE@", STYLED)
    for line in [
        '{"model\\u005fa": "x", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@}}',
        '{"model_a": "z", "model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@}}',
        '{"model_a": "x", "model_b": "y", "winner": "tie", "tstamp": NaN, "conv_metadata": {@STYLE@}}',
        '{"model_a": "x", "model_b": "y", "winner": "tie", "tstamp": 1e400, "conv_metadata": {@STYLE@}}',
        '{"model_a": "x", "model_b": "y", "winner": "tie", "pad": "\\ud800", "conv_metadata": {@STYLE@}}',
        '{"model_a": "\\ud800", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@}}',
        '{"model_a": "x", "model_b": "y", "winner": "model_b", "conv_metadata": {@STYLE@, '
        '"bold_count_a": {"**": 1e1, "__": 2.0}}}',
        '{"model_a": "x", "model_b": "y", "winner": "model_a", "conv_metadata": {@STYLE@, '
        '"sum_assistant_a_tokens": 100000000000000000000000000000, '
        '"header_count_b": {"h1": -1, "h1": 4}}}',
        '  {"winner": "tie (bothbad)", "model_b": "y", "model_a": "w", "conv_metadata": {@STYLE@}}\t ',
    ]
]


@pytest.mark.parametrize("style", [True, False])
def test_unusual_valid_lines_give_the_columns_the_record_parser_gives(tmp_path, style):
    path = write_export(tmp_path / "v.jsonl", n=20)
    with path.open("a") as out:
        out.write("\n".join(UNUSUAL_VALID_LINES) + "\n")
        if not style:  # a raw fit takes lines without style metadata, or with null
            out.write('{"model_a": "x", "model_b": "y", "winner": "tie"}\n')
            out.write('{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": null}\n')
            out.write('{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {}}\n')
    new = battles_from_file(path, style=style)
    old = battles_from_records(read_battle_export(path, require_style=style), style=style)
    assert_same_battles(new, old)
    assert new.n_battles == 20 + len(UNUSUAL_VALID_LINES) + (0 if style else 3)


@pytest.mark.parametrize(
    "line",
    [
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "pad": "\\x"}',  # bad escape
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "pad": [1,]}',
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "pad": "a\tb"}',  # raw control
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "pad": "\xff"}',  # not UTF-8
        b'\xef\xbb\xbf{"model_a": "x", "model_b": "y", "winner": "tie"}',  # a BOM
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {"x": 1}}',
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@, '
        b'"list_count_b": {"ordered": 1.5}}}'.replace(b"@STYLE@", STYLED.encode()),
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@, '
        b'"header_count_a": {"h2": 1, "h2": -3}}}'.replace(b"@STYLE@", STYLED.encode()),
        b'{"model_a": "x", "model_b": "y", "winner": "tie", "conv_metadata": {@STYLE@, '
        b'"bold_count_a": null}}'.replace(b"@STYLE@", STYLED.encode()),
        b'{"model_a": "x", "model_b": "x", "winner": "tie", "conv_metadata": {@STYLE@}}'.replace(
            b"@STYLE@", STYLED.encode()
        ),
    ],
)
def test_hostile_lines_the_fast_decoder_sees_get_the_reference_error(tmp_path, line):
    path = bad_file(tmp_path, line)
    with pytest.raises(ExportFormatError) as new:
        battle_columns_from_file(path, style=True)
    try:
        read_battle_export(path, require_style=True)
    except ExportFormatError as old:
        assert str(new.value) == str(old)
    except UnicodeDecodeError:  # the record reader opens the file as text
        assert str(new.value) == "line 4: not UTF-8"
    else:
        pytest.fail("the reference parser accepted it")
    assert new.value.line == 4


def votes_in_the_database(n=600, seed=7):
    """Counted and uncounted votes, leaks, ties, an excluded voter, two contestants sharing
    a display name, and style counts of every kind, written in bulk."""
    rng = random.Random(seed)
    players = [factories.contestant(f"m{i}") for i in range(6)]
    players.append(factories.contestant("m0"))  # the same name: rated as one model
    battles, answers, votes = [], [], []
    for i in range(n):
        a, b = rng.sample(players, 2)
        while a.display_name == b.display_name:  # neither path can rate m0 against m0
            a, b = rng.sample(players, 2)
        voter = "spammer" if i % 50 == 0 else f"voter-{i % 13}"
        battle = Battle(
            prompt="p",
            voter_key=factories.voter_key(voter),
            ip_hash="ip",
            state=Battle.State.COMPLETE,
            leaked_sides=rng.choice(["", "", "", "", "a", "b"]),
            phase=rng.choice(["p1", "p2"]),
        )
        battles.append(battle)
        for side, who in (("a", a), ("b", b)):
            counts = side_counts(rng, side, plain=rng.random() < 0.7)
            answers.append(
                Answer(
                    battle=battle,
                    side=side,
                    contestant=who,
                    tokens=counts[f"sum_assistant_{side}_tokens"],
                    header_counts=counts[f"header_count_{side}"],
                    list_counts=counts[f"list_count_{side}"],
                    bold_counts={
                        k: v for k, v in counts[f"bold_count_{side}"].items() if k != "~~"
                    },
                )
            )
        votes.append(
            Vote(
                battle=battle,
                choice=rng.choice(["a", "b", "tie", "bothbad"]),
                counted=rng.random() < 0.9,
                voter_key=battle.voter_key,
                ip_hash="ip",
                seconds_after_answers=5.0,
            )
        )
    Battle.objects.bulk_create(battles)
    Answer.objects.bulk_create(answers)
    Vote.objects.bulk_create(votes)
    VoterExclusion.objects.create(
        kind=VoterExclusion.Kind.SESSION, key=factories.voter_key("spammer"), reason="bot"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("phase", [None, "p2"])
def test_the_columnar_database_read_gives_the_fit_what_the_rows_gave_it(phase):
    votes_in_the_database()

    new, new_last = counted_battles(phase=phase)
    old, old_last = counted_battles_row_by_row(phase=phase)

    assert new is not None and old is not None
    assert_same_battles(new, old)
    assert new_last == old_last
    assert 200 < new.n_battles < 600  # uncounted, excluded and other-phase votes left out
    assert fit_ratings(new, ci="sandwich").to_json() == fit_ratings(old, ci="sandwich").to_json()


@pytest.mark.django_db
def test_with_no_counted_votes_there_is_nothing_to_fit():
    assert counted_battles() == (None, None)


def test_byte_ranges_read_in_parallel_give_the_same_columns(tmp_path):
    path = write_export(tmp_path / "v.jsonl")
    one = battle_columns_from_file(path, style=True, workers=1)
    for workers in (2, 3, 7):
        several = battle_columns_from_file(path, style=True, workers=workers)
        assert_same_battles(several.battles(), one.battles())


@pytest.mark.parametrize("workers", [1, 3])
def test_a_bad_line_late_in_the_file_is_numbered_in_the_whole_file(tmp_path, workers):
    path = write_export(tmp_path / "v.jsonl", n=2000)  # 2,003 lines with 3 blank ones
    lines = path.read_bytes().split(b"\n")
    lines[1800] = b'{"model_a": "x", "model_b": "x", "winner": "tie"}'
    lines[1900] = b"z" * 5000  # a later, different error is not the one reported
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ExportFormatError, match=r"^line 1801: a battle of 'x' against itself$"):
        battle_columns_from_file(path, style=True, workers=workers, max_line_bytes=4096)


@pytest.mark.django_db
def test_databases_without_copy_read_the_same_rows_through_a_cursor(monkeypatch):
    from types import SimpleNamespace

    from arena.leaderboard import inputs

    votes_in_the_database(n=200)
    by_copy, _ = counted_battles()
    monkeypatch.setattr(inputs, "connection", SimpleNamespace(vendor="sqlite"))
    by_rows, _ = counted_battles()
    assert by_copy is not None and by_rows is not None
    assert_same_battles(by_rows, by_copy)
