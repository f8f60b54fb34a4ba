"""The live refit reads only new votes, and its battles stay those of a full read."""

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from arena.battles.models import Answer, Battle, Vote, VoterExclusion
from arena.leaderboard import live_inputs
from arena.leaderboard.inputs import counted_battles
from arena.leaderboard.live_inputs import OVERLAP, live_battles, live_inputs_forget
from arena.rating import fit_ratings
from tests import factories

pytestmark = pytest.mark.django_db
START = datetime(2026, 11, 1, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def nothing_held():
    live_inputs_forget()
    yield
    live_inputs_forget()


@pytest.fixture
def players():
    return [factories.contestant(f"m{i}") for i in range(5)]


def add_votes(players, n, *, at, rng, counted=True, voter="voter-1"):
    """`n` voted battles, their votes made at `at`, `at` + 1 ms, ..."""
    battles, answers, votes = [], [], []
    for _ in range(n):
        a, b = rng.sample(players, 2)
        battle = Battle(
            prompt="p",
            voter_key=factories.voter_key(voter),
            ip_hash="ip",
            state=Battle.State.COMPLETE,
            leaked_sides=rng.choice(["", "", "", "a"]),
        )
        battles.append(battle)
        for side, who in (("a", a), ("b", b)):
            answers.append(
                Answer(
                    battle=battle,
                    side=side,
                    contestant=who,
                    tokens=rng.randrange(400),
                    header_counts={"h1": rng.randrange(3)},
                    list_counts={"ordered": rng.randrange(4), "unordered": rng.randrange(2)},
                    bold_counts={"**": rng.randrange(3)},
                )
            )
        votes.append(
            Vote(
                battle=battle,
                choice=rng.choice(["a", "b", "tie", "bothbad"]),
                counted=counted,
                voter_key=battle.voter_key,
                ip_hash="ip",
                seconds_after_answers=5.0,
            )
        )
    Battle.objects.bulk_create(battles)
    Answer.objects.bulk_create(answers)
    Vote.objects.bulk_create(votes)
    for i, battle in enumerate(battles):  # auto_now_add set them to now
        Vote.objects.filter(battle=battle).update(created_at=at + timedelta(milliseconds=i))
    return battles


def rows(battles):
    """The battles as a sorted table: the same multiset of battles, whatever their order."""
    table = np.column_stack([battles.a, battles.b, battles.outcome, battles.style])
    return table[np.lexsort(table.T[::-1])]


def assert_as_full_read(live):
    full, last = counted_battles()
    assert live.battles.models == full.models
    assert live.last_vote_at == last
    np.testing.assert_array_equal(rows(live.battles), rows(full))
    for style in (True, False):
        ours = fit_ratings(live.battles, style=style, ci="sandwich")
        reference = fit_ratings(full, style=style, ci="sandwich")
        assert ours.models == reference.models
        np.testing.assert_allclose(ours.theta, reference.theta, rtol=0, atol=1e-9)


def test_each_refit_reads_only_the_new_votes_and_fits_what_a_full_read_fits(players):
    rng = random.Random(1)
    add_votes(players, 200, at=START, rng=rng)
    first = live_battles()
    assert (first.read, first.votes_read) == ("full", 200)

    at = START + timedelta(seconds=1)
    for step in range(6):
        add_votes(players, 7, at=at, rng=rng)
        live = live_battles()
        assert (live.read, live.votes_read) == ("new votes", 7), step
        assert live.battles.n_battles == 200 + 7 * (step + 1)
        assert_as_full_read(live)
        at += timedelta(seconds=rng.choice([0.5, 3, 30]))  # windows overlap, or not


def test_nothing_new_reads_nothing_and_changes_nothing(players):
    add_votes(players, 50, at=START, rng=random.Random(2))
    live_battles()
    again = live_battles()
    assert (again.read, again.votes_read) == ("new votes", 0)
    assert_as_full_read(again)


def test_a_vote_committed_after_a_newer_one_was_read_is_added_once(players):
    rng = random.Random(3)
    add_votes(players, 100, at=START, rng=rng)
    live_battles()
    # Made (created_at) before the newest vote held, visible only now: inside the overlap.
    add_votes(players, 3, at=START + timedelta(milliseconds=50), rng=rng)
    live = live_battles()
    assert (live.read, live.votes_read) == ("new votes", 3)
    assert live.battles.n_battles == 103
    assert_as_full_read(live)


def test_a_vote_committed_later_than_the_overlap_makes_a_full_read(players):
    rng = random.Random(4)
    add_votes(players, 100, at=START, rng=rng)
    live_battles()
    add_votes(players, 2, at=START - OVERLAP - timedelta(seconds=1), rng=rng)
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 102
    assert_as_full_read(live)


def test_an_exclusion_makes_a_full_read_and_lifting_it_another(players):
    rng = random.Random(5)
    add_votes(players, 80, at=START, rng=rng)
    add_votes(players, 20, at=START + timedelta(seconds=1), rng=rng, voter="bot")
    live_battles()
    exclusion = VoterExclusion.objects.create(
        kind=VoterExclusion.Kind.SESSION, key=factories.voter_key("bot"), reason="bot"
    )
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 80
    assert_as_full_read(live)
    VoterExclusion.objects.filter(pk=exclusion.pk).update(lifted_at=START)
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 100
    assert_as_full_read(live)


def test_votes_deleted_or_uncounted_after_the_fact_make_a_full_read(players):
    rng = random.Random(6)
    battles = add_votes(players, 60, at=START, rng=rng)
    live_battles()
    Vote.objects.filter(battle=battles[5]).delete()  # through the ORM: the signal
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 59
    assert_as_full_read(live)
    # Behind the signals' back: the count of votes in the fit no longer matches.
    Vote.objects.filter(battle=battles[7]).update(counted=False)
    add_votes(players, 1, at=START + timedelta(seconds=1), rng=rng)
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 59
    assert_as_full_read(live)


def test_what_a_fitted_vote_stands_for_changing_makes_a_full_read(players):
    rng = random.Random(7)
    battles = add_votes(players, 60, at=START, rng=rng)
    live_battles()

    answer = Answer.objects.filter(battle=battles[3], side="a").get()
    answer.tokens = 10_000  # restyled
    answer.save()
    assert live_battles().read == "full"

    battle = Battle.objects.get(pk=battles[4].pk)
    battle.leaked_sides = "b"
    battle.save()
    assert live_battles().read == "full"

    renamed = players[0]
    renamed.display_name = "m-renamed"
    renamed.save()
    live = live_battles()
    assert live.read == "full" and "m-renamed" in live.battles.models
    assert_as_full_read(live)

    players[1].save()  # saved again unchanged: no reason to read everything
    assert live_battles().read == "new votes"


def test_changes_behind_djangos_back_are_read_within_the_full_read_interval(players, monkeypatch):
    rng = random.Random(8)
    battles = add_votes(players, 40, at=START, rng=rng)
    live_battles()
    choice = Vote.objects.get(battle=battles[0]).choice
    Vote.objects.filter(battle=battles[0]).update(choice="b" if choice != "b" else "a")
    assert live_battles().read == "new votes"  # the count is the same: not seen yet
    monkeypatch.setattr(live_inputs, "FULL_READ_SECONDS", 0.0)
    live = live_battles()
    assert live.read == "full"
    assert_as_full_read(live)


def test_no_votes_in_the_fit_is_nothing_to_fit(players):
    assert live_battles() is None
    add_votes(players, 5, at=START, rng=random.Random(9), counted=False)
    assert live_battles() is None


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_each_read_is_one_consistent_snapshot(players):
    rng = random.Random(10)
    add_votes(players, 30, at=START, rng=rng)
    assert live_battles().read == "full"
    add_votes(players, 4, at=START + timedelta(seconds=2), rng=rng)
    live = live_battles()
    assert (live.read, live.votes_read) == ("new votes", 4)
    assert_as_full_read(live)


def test_a_read_that_fails_halfway_leaves_nothing_held(players, monkeypatch):
    rng = random.Random(11)
    add_votes(players, 30, at=START, rng=rng)
    live_battles()
    add_votes(players, 3, at=START + timedelta(seconds=1), rng=rng)
    real_append = live_inputs._Inputs.append

    def append_then_fail(self, rows):
        real_append(self, rows)
        raise ConnectionError("the database went away")

    monkeypatch.setattr(live_inputs._Inputs, "append", append_then_fail)
    with pytest.raises(ConnectionError):
        live_battles()
    monkeypatch.setattr(live_inputs._Inputs, "append", real_append)
    live = live_battles()
    assert live.read == "full" and live.battles.n_battles == 33
    assert_as_full_read(live)
