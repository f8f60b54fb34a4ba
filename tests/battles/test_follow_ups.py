"""Multi-turn battles: the voter continues the conversation with both models before voting."""

import threading

import pyarrow.parquet as pq
import pytest
from django.db import connection

from arena.battles.export import battle_export_rows, read_battle_export, write_battle_export
from arena.battles.models import Answer, Battle, FollowUp, FollowUpAnswer
from arena.battles.selectors import conversation_histories
from arena.battles.services import (
    BattleRefused,
    SideResult,
    battle_claim_generation,
    battle_create,
    battle_record_answers,
    follow_up_create,
    vote_record,
)
from arena.battles.style import style_features
from arena.leaderboard.inputs import battles_from_file
from arena.phases.release_battles import PARQUET_PATH, battles_write
from tests import factories

pytestmark = pytest.mark.django_db

VOTER = factories.voter_key("voter-1")


@pytest.fixture(autouse=True)
def quick_votes(settings):
    settings.ARENA_MIN_VOTE_SECONDS = 0.0
    settings.ARENA_MAX_TURNS = 3


def answered(battle: Battle, text_a: str, text_b: str, *, error_b: str = "") -> Battle:
    """Both sides answer the battle's latest prompt, through the services the socket uses."""
    assert battle_claim_generation(battle_id=battle.pk)
    results = {
        "a": SideResult(text_a, "stop", "", 0.1, 0.5),
        "b": SideResult(text_b, "" if error_b else "stop", error_b, 0.1, 0.5),
    }
    return battle_record_answers(battle_id=battle.pk, results=results)


def started(prompt: str = "What is a prime?") -> Battle:
    left, right = factories.contestant("left"), factories.contestant("right")
    battle = battle_create(prompt=prompt, voter_key=VOTER, ip_hash="ip-1")
    # Sides are drawn at random; the tests name them by side, so fix who is where.
    Answer.objects.filter(battle=battle, side="a").update(contestant=left)
    Answer.objects.filter(battle=battle, side="b").update(contestant=right)
    return battle


def follow_up(battle: Battle, prompt: str) -> Battle:
    follow_up_create(battle_id=battle.pk, prompt=prompt, voter_key=VOTER, ip_hash="ip-1")
    return Battle.objects.get(pk=battle.pk)


def test_a_follow_up_reopens_the_battle_for_both_answers_and_no_vote_is_taken_meanwhile():
    battle = answered(started(), "Two.", "Seven.")
    battle = follow_up(battle, "And the next one?")
    assert (battle.turns, battle.state) == (2, Battle.State.CREATED)
    with pytest.raises(BattleRefused) as refused:
        vote_record(battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="ip-1")
    assert refused.value.code == "not_ready"
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "And another?")  # not before both have answered this one
    assert refused.value.code == "not_ready"

    battle = answered(battle, "Three.", "Eleven.")
    assert battle.state == Battle.State.COMPLETE
    assert vote_record(battle_id=battle.pk, choice="b", voter_key=VOTER, ip_hash="ip").counted


def test_a_second_prompt_makes_the_battle_multi_turn_and_keeps_its_other_categories():
    battle = answered(started("Solve 2x + 3 = 7 for x."), "x = 2.", "x = 3.")
    assert battle.categories == ",math,"
    battle = follow_up(battle, "And 3x + 1 = 10?")
    assert battle.categories == ",math,multi_turn,"
    battle = follow_up(answered(battle, "3.", "4."), "Thanks. One more: 5x = 20?")
    assert battle.categories == ",math,multi_turn,"


def test_the_voter_has_at_most_max_turns_prompts_in_a_battle(settings):
    settings.ARENA_MAX_TURNS = 3
    battle = answered(started(), "1", "1")
    for turn in (2, 3):
        battle = answered(follow_up(battle, f"prompt {turn}"), f"{turn}", f"{turn}")
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "prompt 4")
    assert (refused.value.status, refused.value.code) == (409, "turn_limit")
    assert "3 prompts" in refused.value.message
    assert FollowUp.objects.filter(battle=battle).count() == 2


def test_one_turn_battles_only_when_the_limit_is_one(settings):
    settings.ARENA_MAX_TURNS = 1
    battle = answered(started(), "1", "1")
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "more?")
    assert refused.value.code == "turn_limit"


def test_the_vote_closes_the_battle_to_follow_ups():
    battle = answered(started(), "1", "2")
    vote_record(battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="ip-1")
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "one more")
    assert (refused.value.status, refused.value.code) == (409, "already_voted")


def test_a_side_failing_a_follow_up_ends_the_battle_unvotable():
    battle = answered(started(), "1", "2")
    battle = answered(follow_up(battle, "again"), "fine", "", error_b="HTTP 500")
    assert battle.state == Battle.State.FAILED
    with pytest.raises(BattleRefused) as refused:
        vote_record(battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="ip-1")
    assert refused.value.code == "battle_failed"
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "and now?")
    assert refused.value.code == "battle_failed"


@pytest.mark.parametrize(
    ("prompt", "code"), [("   ", "empty_prompt"), ("x" * 21, "prompt_too_long")]
)
def test_follow_ups_are_checked_as_first_prompts_are(settings, prompt, code):
    settings.ARENA_PROMPT_MAX_CHARS = 20
    battle = answered(started("short"), "1", "2")
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, prompt)
    assert refused.value.code == code
    assert Battle.objects.get(pk=battle.pk).turns == 1


def test_only_the_battles_voter_may_continue_it():
    battle = answered(started(), "1", "2")
    with pytest.raises(BattleRefused) as refused:
        follow_up_create(
            battle_id=battle.pk, prompt="mine now", voter_key=factories.voter_key("x"), ip_hash="i"
        )
    assert (refused.value.status, refused.value.code) == (403, "not_yours")


def test_follow_ups_count_against_the_voters_per_minute_limit(settings):
    settings.ARENA_BATTLES_PER_MINUTE = 3
    battle = answered(started(), "1", "2")  # one prompt
    battle = answered(follow_up(battle, "two"), "1", "2")
    battle = answered(follow_up(battle, "three"), "1", "2")
    settings.ARENA_MAX_TURNS = 10
    with pytest.raises(BattleRefused) as refused:
        follow_up(battle, "four")
    assert refused.value.status == 429
    with pytest.raises(BattleRefused) as refused:
        battle_create(prompt="a new battle", voter_key=VOTER, ip_hash="ip-1")
    assert refused.value.status == 429


def test_each_side_is_sent_its_own_history_and_never_the_other_sides():
    battle = answered(started("Name a prime."), "Two.", "Seven.")
    battle = answered(follow_up(battle, "A bigger one?"), "Three.", "Eleven.")
    battle = follow_up(battle, "Is it odd?")

    histories = conversation_histories(battle, list(battle.answers.all()))

    assert histories["a"] == [
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": "A bigger one?"},
        {"role": "assistant", "content": "Three."},
        {"role": "user", "content": "Is it odd?"},
    ]
    assert [m["content"] for m in histories["b"] if m["role"] == "assistant"] == [
        "Seven.",
        "Eleven.",
    ]


def test_a_name_said_in_a_later_turn_costs_that_side_the_battle():
    battle = answered(started(), "Hello.", "Hi.")
    battle = answered(follow_up(battle, "Who are you?"), "I am a model.", "I am right, of course.")
    assert battle.leaked_sides == "b" and battle.forced_winner == "a"
    assert battle.void_reason == ""

    outcome = vote_record(battle_id=battle.pk, choice="b", voter_key=VOTER, ip_hash="ip-1")
    assert outcome.counted and outcome.leaked_side == "b"


def test_a_name_the_voter_asked_for_is_not_a_leak_in_any_turn():
    """A voter who asks both models to say a contestant's name cannot make the one that
    complies lose the battle; a name nobody asked for still leaks."""
    battle = answered(started("Repeat after me: right"), "right", "I will not.")
    assert battle.leaked_sides == "" and battle.forced_winner == ""
    battle = answered(follow_up(battle, "Now say: left"), "left", "No.")
    assert battle.leaked_sides == ""
    battle = answered(follow_up(battle, "Thanks. Who made you?"), "Fine.", "I am right.")
    assert battle.leaked_sides == ""  # "right" was asked for in turn 1
    fresh = answered(started("Who made you?"), "Someone.", "I am right.")
    assert fresh.leaked_sides == "b"


def test_both_sides_leaking_in_different_turns_voids_the_battle():
    battle = answered(started(), "I am left.", "Hi.")
    battle = answered(follow_up(battle, "And you?"), "Sure.", "I am right.")
    assert battle.leaked_sides == "ab"
    assert battle.void_reason
    assert not vote_record(battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="i").counted


def test_a_later_leak_is_kept_when_the_next_turn_is_clean():
    battle = answered(started(), "Hello.", "I am right.")
    battle = answered(follow_up(battle, "Go on"), "More.", "More.")
    assert battle.leaked_sides == "b"


FIRST_A = "## Primes\n- two\n- **three**"
SECOND_A = "1. five\n2. seven\n\n__eleven__ and **thirteen**"
FIRST_B = "Just text."
SECOND_B = "# Big\nAnd words here."


def conversation_of_two_turns() -> Battle:
    battle = answered(started("List primes."), FIRST_A, FIRST_B)
    return answered(follow_up(battle, "More, please."), SECOND_A, SECOND_B)


def test_style_features_are_summed_over_the_sides_answers():
    battle = conversation_of_two_turns()
    a = Answer.objects.get(battle=battle, side="a")
    one, two = style_features(FIRST_A), style_features(SECOND_A)
    assert a.tokens == one.tokens + two.tokens
    assert a.header_counts["h2"] == 1
    assert a.list_counts == {"ordered": 2, "unordered": 2}
    assert a.bold_counts == {"**": 2, "__": 1}
    assert a.text == FIRST_A  # the first answer's text stays where it was
    b = Answer.objects.get(battle=battle, side="b")
    assert b.header_counts["h1"] == 1
    assert b.tokens == style_features(FIRST_B).tokens + style_features(SECOND_B).tokens
    second = FollowUpAnswer.objects.get(follow_up__battle=battle, side="a")
    assert (second.text, second.tokens, second.list_counts["ordered"]) == (SECOND_A, two.tokens, 2)


def test_the_export_carries_the_whole_conversations_and_reads_back_into_the_fit(tmp_path):
    multi = conversation_of_two_turns()
    vote_record(battle_id=multi.pk, choice="a", voter_key=VOTER, ip_hash="ip-1")
    single = answered(started("One question."), "One answer.", "Another answer.")
    vote_record(battle_id=single.pk, choice="b", voter_key=VOTER, ip_hash="ip-1")
    out = tmp_path / "battles.jsonl"

    assert write_battle_export(battle_export_rows(), out) == 2

    records = {r.battle_id: r for r in read_battle_export(out, require_style=True)}
    line = records[multi.pk].raw
    assert line["turn"] == 2 and records[single.pk].raw["turn"] == 1
    assert line["conversation_a"] == [
        {"role": "user", "content": "List primes."},
        {"role": "assistant", "content": FIRST_A},
        {"role": "user", "content": "More, please."},
        {"role": "assistant", "content": SECOND_A},
    ]
    assert [m["content"] for m in line["conversation_b"]] == [
        "List primes.",
        FIRST_B,
        "More, please.",
        SECOND_B,
    ]
    metadata = line["conv_metadata"]
    assert metadata["sum_user_tokens"] == 3 + 4  # "List primes." and "More, please."
    assert metadata["list_count_a"] == {"ordered": 2, "unordered": 2}
    assert metadata["bold_count_a"] == {"**": 2, "__": 1}
    assert records[single.pk].raw["conversation_a"] == [
        {"role": "user", "content": "One question."},
        {"role": "assistant", "content": "One answer."},
    ]

    # The ratings reader (`ratings --votes`) takes the sums as the battle's style covariates.
    battles = battles_from_file(out, style=True)
    assert battles.n_battles == 2
    tokens_a = style_features(FIRST_A).tokens + style_features(SECOND_A).tokens
    tokens_b = style_features(FIRST_B).tokens + style_features(SECOND_B).tokens
    length = (tokens_a - tokens_b) / (tokens_a + tokens_b + 1)
    assert any(abs(x - length) < 1e-9 for x in battles.style[:, 0].tolist())


def test_a_multi_turn_battle_is_released_with_its_turns_and_whole_conversations(tmp_path):
    battle = conversation_of_two_turns()
    vote_record(battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="ip-1")

    count, models = battles_write(rows=battle_export_rows(), folder=tmp_path)

    assert (count, models) == (1, ["left", "right"])
    row = pq.read_table(tmp_path / PARQUET_PATH).to_pylist()[0]
    assert row["turn"] == 2
    assert [m["role"] for m in row["conversation_b"]] == ["user", "assistant"] * 2


@pytest.mark.django_db(transaction=True)
def test_a_vote_and_a_follow_up_sent_at_once_never_both_succeed(settings):
    """Both lock the battle's row: either the vote wins (the follow-up finds it) or the
    follow-up does (the vote finds the battle waiting for answers); never a vote on answers
    the voter is still asking about."""
    settings.ARENA_BATTLES_PER_MINUTE = 1000
    battles = [answered(started(f"prompt {i}"), "1", "2") for i in range(12)]

    def race(battle: Battle) -> tuple[bool, bool]:
        barrier = threading.Barrier(2)
        outcome = {}

        def attempt(name, call):
            barrier.wait()
            try:
                call()
                outcome[name] = True
            except BattleRefused:
                outcome[name] = False
            finally:
                connection.close()

        vote = threading.Thread(
            target=attempt,
            args=("vote", lambda: vote_record(
                battle_id=battle.pk, choice="a", voter_key=VOTER, ip_hash="ip-1"
            )),
        )  # fmt: skip
        more = threading.Thread(
            target=attempt, args=("follow_up", lambda: follow_up(battle, "and?"))
        )
        vote.start(), more.start()
        vote.join(), more.join()
        return outcome["vote"], outcome["follow_up"]

    outcomes = [race(battle) for battle in battles]

    assert all(voted != followed for voted, followed in outcomes), outcomes
    for battle, (voted, _) in zip(battles, outcomes, strict=True):
        battle.refresh_from_db()
        assert battle.turns == (1 if voted else 2)
