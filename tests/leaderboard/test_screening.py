"""Voter screening on hand-made vote streams: who is flagged, on what evidence, and who is not."""

from __future__ import annotations

import math
import random

from arena.leaderboard.screening import ScreeningRules, VoteSeen, screen

RULES = ScreeningRules()
STRENGTH = {"strong": 1.5, "good": 0.5, "fair": -0.5, "weak": -1.5}  # natural-log odds


def true_probability(a: str, b: str) -> float:
    return 1 / (1 + math.exp(STRENGTH[b] - STRENGTH[a]))


def person(
    rng: random.Random, voter: str, n: int, *, network: str = "venue", start: float = 0.0
) -> list[VoteSeen]:
    """`n` votes from a person who follows the true strengths, misclicks now and then, and
    takes about half a minute per battle."""
    votes = []
    for i in range(n):
        a, b = rng.sample(sorted(STRENGTH), 2)
        if rng.random() < 0.1:
            choice = rng.choice(["a", "b", "tie"])
        else:
            choice = "a" if rng.random() < true_probability(a, b) else "b"
        votes.append(VoteSeen(voter, network, start + 30.0 * i + rng.random(), a, b, choice))
    return votes


def bot(
    rng: random.Random, voter: str, n: int, favourite: str, *, network: str = "bot-net"
) -> list[VoteSeen]:
    """A bot that recognises `favourite` by its answers: it votes for it whenever it is in the
    battle, and at random otherwise. Paced like a person, so no burst gives it away."""
    votes = []
    for i in range(n):
        a, b = rng.sample(sorted(STRENGTH), 2)
        choice = "a" if a == favourite else "b" if b == favourite else rng.choice("ab")
        votes.append(VoteSeen(voter, network, 40.0 * i, a, b, choice))
    return votes


def crowd(rng: random.Random, voters: int = 40, votes_each: int = 30) -> list[VoteSeen]:
    return [v for i in range(voters) for v in person(rng, f"person-{i}", votes_each)]


def flags_of(flagged, kind, key):
    return {s.name for f in flagged if (f.kind, f.key) == (kind, key) for s in f.signals}


def test_a_bot_voting_for_the_weakest_model_is_flagged_and_the_people_are_not():
    rng = random.Random(1)
    votes = crowd(rng) + bot(rng, "sybil", 60, "weak")

    flagged = screen(votes, true_probability, RULES)

    assert flags_of(flagged, "session", "sybil") == {"one_sided", "crowd_disagreement"}
    assert [f.key for f in flagged if f.kind == "session"] == ["sybil"]
    evidence = next(f for f in flagged if f.key == "sybil").evidence
    one_sided = next(s for s in evidence["signals"] if s["name"] == "one_sided")
    assert one_sided["detail"].startswith("voted for weak in ")
    assert one_sided["value"] >= RULES.z_limit


def test_one_surprising_vote_from_a_person_is_not_evidence():
    # Nine votes for the clear favourite and one for the underdog of a 999:1 pair: people
    # misclick, so the lapse rate keeps a single vote from making a z-score.
    votes = [VoteSeen("p", "n", 30.0 * i, "strong", "weak", "a") for i in range(9)]
    votes.append(VoteSeen("p", "n", 270.0, "strong", "weak", "b"))
    assert screen(votes, lambda a, b: 0.999 if a == "strong" else 0.001, RULES) == []


def test_a_voter_with_too_few_decisive_votes_is_not_judged():
    rng = random.Random(2)
    few = bot(rng, "sybil", 6, "weak")
    assert screen(few, true_probability, RULES) == []


def test_ties_and_unknown_pairs_are_not_counted_as_decisive_votes():
    votes = [VoteSeen("p", "n", 30.0 * i, "weak", "strong", "tie") for i in range(30)]
    votes += [VoteSeen("p", "n", 30.0 * i + 1000, "weak", "new", "a") for i in range(30)]
    assert screen(votes, lambda a, b: None if "new" in (a, b) else 0.2, RULES) == []


def test_a_burst_of_votes_from_one_session_is_flagged():
    fast = [VoteSeen("fast", "n", 4.0 * i, "good", "fair", "a") for i in range(12)]
    paced = [VoteSeen("paced", "n", 30.0 * i, "good", "fair", "a") for i in range(12)]

    flagged = screen(fast + paced, true_probability, RULES)

    assert flags_of(flagged, "session", "fast") == {"burst"}
    assert flags_of(flagged, "session", "paced") == set()
    burst = next(f for f in flagged if f.key == "fast").signals[0]
    assert burst.value == 12 and burst.detail == "12 votes within 60 s"


def test_a_bot_with_a_fresh_cookie_for_every_vote_is_caught_as_a_network():
    rng = random.Random(3)
    rotating = [
        VoteSeen(f"cookie-{i}", "bot-net", v.at, v.model_a, v.model_b, v.choice)
        for i, v in enumerate(bot(rng, "unused", 60, "weak"))
    ]
    flagged = screen(crowd(rng) + rotating, true_probability, RULES)

    assert not any(f.kind == "session" for f in flagged)  # one vote each: nothing to judge
    assert flags_of(flagged, "network", "bot-net") == {
        "one_sided",
        "crowd_disagreement",
        "many_sessions",
    }
    assert flags_of(flagged, "network", "venue") == {"many_sessions"}  # 40 people on the wifi


def test_the_strongest_evidence_comes_first():
    rng = random.Random(4)
    votes = crowd(rng, voters=5) + bot(rng, "loud", 80, "weak") + bot(rng, "quiet", 25, "fair")
    flagged = [f.key for f in screen(votes, true_probability, RULES) if f.kind == "session"]
    assert flagged[0] == "loud"
