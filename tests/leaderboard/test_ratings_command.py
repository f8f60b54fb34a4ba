import json
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from arena.battles.services import vote_record
from arena.leaderboard.management.commands import ratings as ratings_command
from arena.leaderboard.models import RatingSnapshot
from arena.rating.synthetic import synthetic_battles
from tests import factories

WINNER = {1.0: "model_a", 0.0: "model_b", 0.5: "tie"}
EMPTY_STYLE = {
    "header_count_a": {},
    "header_count_b": {},
    "list_count_a": {},
    "list_count_b": {},
    "bold_count_a": {},
    "bold_count_b": {},
}


def write_export(path, n=400, seed=3, style=True):
    battles, _ = synthetic_battles(n_battles=n, n_models=4, seed=seed, tie_share=0.1)
    with path.open("w") as out:
        for i in range(n):
            row = {
                "battle_id": f"b{i}",
                "model_a": battles.models[battles.a[i]],
                "model_b": battles.models[battles.b[i]],
                "winner": WINNER[battles.outcome[i]],
                "tstamp": 1700000000 + i,
            }
            if style:
                row["conv_metadata"] = {
                    "sum_assistant_a_tokens": 50 + i % 40,
                    "sum_assistant_b_tokens": 60,
                    **EMPTY_STYLE,
                }
            out.write(json.dumps(row) + "\n")
    return path


def run(*args):
    out = StringIO()
    call_command("ratings", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_battle_file_is_rated_in_the_contract_json(tmp_path):
    output = json.loads(
        run("--votes", str(write_export(tmp_path / "v.jsonl")), "--json", "--bootstrap", "20")
    )
    assert output["method"] == "style-controlled bradley-terry"
    assert output["n_battles"] == 400
    assert set(output["style_coefficients"]) == {"length", "headers", "lists", "bold"}
    row = output["scores"][0]
    assert set(row) == {"model", "score", "ci_low", "ci_high", "rank", "n_battles"}
    assert row["ci_low"] <= row["score"] <= row["ci_high"]
    assert sum(s["score"] for s in output["scores"]) / 4 == pytest.approx(1000, abs=0.05)
    assert len(output["raw_scores"]) == 4


def arena_row(model_a, model_b, winner, side_a, side_b):
    """A line as the public Chatbot Arena data has it, fields we do not use included."""
    tokens_a, headers_a, lists_a, bold_a = side_a
    tokens_b, headers_b, lists_b, bold_b = side_b
    h = {f"h{i}": 0 for i in range(1, 7)}
    return {
        "question_id": f"{model_a}-{model_b}-{winner}",
        "model_a": model_a,
        "model_b": model_b,
        "winner": winner,
        "judge": "arena_user_1234",
        "turn": 1,
        "anony": True,
        "language": "English",
        "tstamp": 1717000000.5,
        "dedup_tag": {"high_freq": False, "sampled": True},
        "category_tag": {"math_v0.1": {"math": False}},
        "conv_metadata": {
            "sum_user_tokens": 12,
            "sum_assistant_a_tokens": tokens_a,
            "sum_assistant_b_tokens": tokens_b,
            "context_a_tokens": 40,
            "context_b_tokens": 41,
            "turns": 1,
            "header_count_a": {**h, **headers_a},
            "header_count_b": {**h, **headers_b},
            "list_count_a": {"ordered": 0, "unordered": 0, **lists_a},
            "list_count_b": {"ordered": 0, "unordered": 0, **lists_b},
            "bold_count_a": {"**": 0, "__": 0, **bold_a},
            "bold_count_b": {"**": 0, "__": 0, **bold_b},
        },
    }


def test_a_chatbot_arena_file_feeds_the_fit_its_style_differences(tmp_path, monkeypatch):
    rows = [
        arena_row(
            "alpha",
            "beta",
            "model_a",
            (30, {"h1": 1, "h2": 2, "h6": 1}, {"ordered": 2, "unordered": 3}, {"**": 1, "__": 2}),
            (10, {"h3": 1}, {}, {"**": 3}),
        ),
        arena_row(
            "alpha",
            "gamma",
            "tie (bothbad)",
            (0, {"h4": 2}, {"unordered": 1}, {"__": 4}),
            (9, {"h5": 1, "h1": 1}, {"ordered": 4}, {}),
        ),
        arena_row(
            "beta", "gamma", "model_b", (5, {"h2": 3}, {}, {"**": 1}), (5, {}, {}, {"__": 1})
        ),
        arena_row("gamma", "alpha", "tie", (100, {}, {"ordered": 2}, {}), (50, {}, {}, {"**": 2})),
    ]
    path = tmp_path / "arena.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    fitted = []
    fit = ratings_command.fit_ratings

    def spy(battles, **options):
        fitted.append((battles, options["style"]))
        return fit(battles, **options)

    monkeypatch.setattr(ratings_command, "fit_ratings", spy)
    output = json.loads(run("--votes", str(path), "--ci", "sandwich", "--json"))

    assert output["n_battles"] == 4
    battles = next(b for b, style in fitted if style)
    assert battles.models == ["alpha", "beta", "gamma"]
    assert battles.outcome.tolist() == [1.0, 0.5, 0.0, 0.5]
    # (a - b) / (a + b + 1) of: tokens, headers h1..h6, list items, bold spans
    expected = [
        [20 / 41, 3 / 6, 5 / 6, 0 / 7],
        [-9 / 10, 0 / 5, -3 / 6, 4 / 5],
        [0 / 11, 3 / 4, 0 / 1, 0 / 3],
        [50 / 151, 0 / 1, 2 / 3, -2 / 3],
    ]
    np.testing.assert_allclose(battles.style, expected, rtol=0, atol=1e-12)


def test_raw_ratings_need_no_style_fields(tmp_path):
    path = write_export(tmp_path / "plain.jsonl", style=False)
    output = json.loads(run("--votes", str(path), "--no-style", "--ci", "sandwich", "--json"))
    assert output["method"] == "bradley-terry"
    assert output["style_coefficients"] is None


def test_the_same_seed_gives_the_same_table(tmp_path):
    path = write_export(tmp_path / "v.jsonl")
    assert run("--votes", str(path), "--json", "--bootstrap", "10", "--seed", "4") == run(
        "--votes", str(path), "--json", "--bootstrap", "10", "--seed", "4"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"model_a": "x", "model_b": "y", "winner": "x"}, "line 3: unknown winner 'x'"),
        (
            {"model_a": "x", "model_b": "x", "winner": "tie"},
            "line 3: a battle of 'x' against itself",
        ),
        ({"model_a": "x", "model_b": "y", "winner": "tie"}, "line 3: no style metadata"),
    ],
)
def test_bad_input_is_refused_naming_the_line(tmp_path, line, message):
    path = write_export(tmp_path / "v.jsonl", n=2)
    with path.open("a") as out:
        out.write(json.dumps(line) + "\n")
    with pytest.raises(CommandError, match=message):
        run("--votes", str(path))


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="is not a file"):
        run("--votes", str(tmp_path / "nope.jsonl"))


@pytest.mark.django_db
def test_from_the_database_counted_votes_are_rated_and_a_snapshot_saved():
    left, right, _ = factories.round_robin_votes(
        ("left", "right", "third"), 12, lambda i: "a" if i % 4 else "b"
    )
    void = factories.complete_battle(a=left, b=right, void_reason="revealed")
    vote_record(battle_id=void.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip")

    output = json.loads(run("--json", "--bootstrap", "20"))

    assert output["n_battles"] == 12  # the void battle does not count
    assert {s["model"] for s in output["scores"]} == {"left", "right", "third"}
    snapshot = RatingSnapshot.objects.get()
    assert snapshot.source == "command" and snapshot.n_battles == 12
    assert {s["model"] for s in snapshot.raw["scores"]} == {"left", "right", "third"}


@pytest.mark.django_db
def test_with_no_counted_votes_the_command_says_so():
    with pytest.raises(CommandError, match="no counted votes"):
        run()
