"""Voters who do not vote like people: four signals, each with the evidence an organizer reads
before excluding anyone (`voter_exclude`). Nothing here excludes a vote by itself.

A *voter* is a session (`voter_key`) or a network (`ip_hash`): a bot that takes a fresh cookie
for every vote is one voter per vote as sessions, and one as a network.

The signals, measured against the crowd's own Bradley–Terry fit of the votes in the fit:

* **crowd disagreement** — on its decisive votes the voter picked the fit's favourite far less
  often than the fit expects: z = (agreed − Σ p_fav) / √Σ p_fav(1 − p_fav) ≤ −z_limit;
* **one-sided** — in the battles a contestant X was in, the voter chose X far more often than
  the fit expects: z = (for X − Σ p_X) / √Σ p_X(1 − p_X) ≥ z_limit (with the longest run of
  consecutive votes for X as evidence). A bot that recognises its own model's answers and
  always votes for it shows this;
* **burst** (sessions) — at least `burst_votes` votes within any `burst_window_s` seconds;
* **many sessions** (networks) — at least `sessions_per_network` sessions voted from one
  address. Sessions on a registered booth kiosk are left out of this count: the kiosk gives
  every person a new one by design, and has its own per-device battle limit.

Probabilities come from the fit with a lapse rate (`LAPSE`): people misclick and change their
minds, so no vote is treated as more than 95 % predictable, and one surprising vote from a
person never makes a z-score by itself. The default `z_limit` of 4 (one-sided p ≈ 3·10⁻⁵)
keeps false flags rare across many voters × contestants; the test is a normal approximation,
so a voter needs `min_votes` decisive votes before either z-signal is computed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from django.conf import settings

from arena.battles.models import Answer, Vote, VoterExclusion
from arena.battles.selectors import exclusions_in_force
from arena.leaderboard.inputs import counted_battles
from arena.rating import fit_ratings

LAPSE = 0.1  # share of votes treated as random whatever the answers: p is kept in [0.05, 0.95]

WinProbability = Callable[[str, str], float | None]  # P(first beats second); None: unknown


@dataclass(frozen=True)
class ScreeningRules:
    min_votes: int = 10
    z_limit: float = 4.0
    burst_window_s: float = 60.0
    burst_votes: int = 10
    sessions_per_network: int = 20

    @classmethod
    def from_settings(cls) -> ScreeningRules:
        return cls(**getattr(settings, "ARENA_VOTER_SCREENING", {}))


@dataclass(frozen=True)
class VoteSeen:
    """One counted vote as screening sees it: who, when, between whom, what they chose."""

    voter_key: str
    ip_hash: str
    at: float  # seconds (epoch)
    model_a: str
    model_b: str
    choice: str  # a, b, tie, bothbad: the voter's own choice, not a leak's forced winner
    kiosk: bool = False  # cast on a registered booth kiosk: a new session per person by design


@dataclass(frozen=True)
class Signal:
    name: str  # crowd_disagreement, one_sided, burst, many_sessions
    detail: str  # the evidence, in words
    value: float  # z-score, votes in the window, or sessions


@dataclass(frozen=True)
class FlaggedVoter:
    kind: str  # VoterExclusion.Kind
    key: str
    votes: int
    signals: list[Signal]
    exclusion_id: int | None = None  # the exclusion in force, if any

    @property
    def evidence(self) -> dict[str, Any]:
        return {
            "votes": self.votes,
            "signals": [
                {"name": s.name, "detail": s.detail, "value": s.value} for s in self.signals
            ],
        }


def screen(
    votes: Sequence[VoteSeen], win_probability: WinProbability, rules: ScreeningRules
) -> list[FlaggedVoter]:
    """Every session and network with at least one signal, strongest evidence first."""
    by_session: dict[str, list[VoteSeen]] = defaultdict(list)
    by_network: dict[str, list[VoteSeen]] = defaultdict(list)
    for vote in sorted(votes, key=lambda v: v.at):
        by_session[vote.voter_key].append(vote)
        by_network[vote.ip_hash].append(vote)
    flagged: list[FlaggedVoter] = []
    for kind, groups, own_signal in (
        (VoterExclusion.Kind.SESSION, by_session, _burst),  # a venue's network bursts anyway
        (VoterExclusion.Kind.NETWORK, by_network, _many_sessions),
    ):
        for key, own in groups.items():
            signals = _fit_signals(own, win_probability, rules)
            extra = own_signal(own, rules)
            if extra:
                signals.append(extra)
            if signals:
                flagged.append(FlaggedVoter(kind, key, len(own), signals))
    return sorted(flagged, key=lambda f: (-max(abs(s.value) for s in f.signals), f.kind, f.key))


def _lapsed(p: float) -> float:
    return LAPSE / 2 + (1 - LAPSE) * p


def _fit_signals(
    votes: list[VoteSeen], win_probability: WinProbability, rules: ScreeningRules
) -> list[Signal]:
    decisive = []  # (vote, P(A beats B) with lapses)
    for vote in votes:
        if vote.choice not in ("a", "b"):
            continue
        p = win_probability(vote.model_a, vote.model_b)
        if p is not None:
            decisive.append((vote, _lapsed(p)))
    if len(decisive) < rules.min_votes:
        return []
    signals = []
    agreed = expected = variance = 0.0
    for vote, p in decisive:
        favourite_p = max(p, 1 - p)
        if p == 0.5:
            continue
        agreed += (vote.choice == "a") == (p > 0.5)
        expected += favourite_p
        variance += favourite_p * (1 - favourite_p)
    if variance > 0:
        z = (agreed - expected) / math.sqrt(variance)
        if z <= -rules.z_limit:
            signals.append(
                Signal(
                    "crowd_disagreement",
                    f"picked the crowd fit's favourite in {agreed:.0f} of {len(decisive)} "
                    f"decisive votes (the fit expects {expected:.1f} ± {math.sqrt(variance):.1f})",
                    round(z, 2),
                )
            )
    signals.extend(_one_sided(decisive, rules))
    return signals


def _one_sided(decisive: list[tuple[VoteSeen, float]], rules: ScreeningRules) -> list[Signal]:
    per_model: dict[str, list[tuple[bool, float]]] = defaultdict(list)  # (voted for it, P(wins))
    for vote, p in decisive:
        per_model[vote.model_a].append((vote.choice == "a", p))
        per_model[vote.model_b].append((vote.choice == "b", 1 - p))
    signals = []
    for model, rows in sorted(per_model.items()):
        if len(rows) < rules.min_votes:
            continue
        chosen = sum(1 for voted, _ in rows if voted)
        expected = sum(p for _, p in rows)
        sd = math.sqrt(sum(p * (1 - p) for _, p in rows))
        z = (chosen - expected) / sd
        if z < rules.z_limit:
            continue
        run = longest = 0
        for voted, _ in rows:
            run = run + 1 if voted else 0
            longest = max(longest, run)
        signals.append(
            Signal(
                "one_sided",
                f"voted for {model} in {chosen} of {len(rows)} decisive battles it was in "
                f"(the crowd fit expects {expected:.1f} ± {sd:.1f}); longest run {longest}",
                round(z, 2),
            )
        )
    return signals


def _burst(votes: list[VoteSeen], rules: ScreeningRules) -> Signal | None:
    times = [v.at for v in votes]  # sorted
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= rules.burst_window_s:
            start += 1
        most = max(most, end - start + 1)
    if most < rules.burst_votes:
        return None
    return Signal(
        "burst",
        f"{most} votes within {rules.burst_window_s:.0f} s",
        float(most),
    )


def _many_sessions(votes: list[VoteSeen], rules: ScreeningRules) -> Signal | None:
    # A registered kiosk gives every person at the booth a new session, so its sessions are
    # not counted here; its votes still count in the network's other signals, and the kiosk
    # has its own battle limit (ARENA_KIOSK_BATTLES_PER_MINUTE).
    per_session: dict[str, int] = defaultdict(int)
    for vote in votes:
        if not vote.kiosk:
            per_session[vote.voter_key] += 1
    if len(per_session) < rules.sessions_per_network:
        return None
    return Signal(
        "many_sessions",
        f"{len(per_session)} sessions voted from this network "
        f"(median {median(per_session.values()):g} votes each)",
        float(len(per_session)),
    )


# -- reading the votes -----------------------------------------------------------------------


def votes_seen() -> list[VoteSeen]:
    """Every counted vote, excluded voters' included (their flags stay visible)."""
    rows = list(
        Vote.objects.filter(counted=True).values_list(
            "battle_id", "voter_key", "ip_hash", "created_at", "choice", "battle__kiosk_id"
        )
    )
    names: dict[str, dict[str, str]] = defaultdict(dict)
    answers = Answer.objects.filter(battle_id__in=[r[0] for r in rows]).values_list(
        "battle_id", "side", "contestant__display_name"
    )
    for battle_id, side, name in answers:
        names[battle_id][side] = name
    return [
        VoteSeen(
            voter, network, at.timestamp(), names[b]["a"], names[b]["b"], choice, kiosk is not None
        )
        for b, voter, network, at, choice, kiosk in rows
        if "a" in names[b] and "b" in names[b]
    ]


def crowd_win_probability() -> WinProbability:
    """P(first beats second) from a plain Bradley–Terry fit of the votes in the fit (excluded
    voters left out, so a bot does not make itself look normal)."""
    battles, _ = counted_battles()
    if battles is None:
        return lambda a, b: None
    result = fit_ratings(battles.without_style(), style=False, ci=None)
    index = {model: i for i, model in enumerate(result.models)}

    def probability(a: str, b: str) -> float | None:
        if a not in index or b not in index or a == b:
            return None
        return float(result.win_probability[index[a], index[b]])

    return probability


def voter_screening(rules: ScreeningRules | None = None) -> list[FlaggedVoter]:
    """The flagged sessions and networks, each with the exclusion in force on it, if any."""
    rules = rules or ScreeningRules.from_settings()
    flagged = screen(votes_seen(), crowd_win_probability(), rules)
    in_force = {(e.kind, e.key): e.pk for e in exclusions_in_force()}
    return [
        FlaggedVoter(f.kind, f.key, f.votes, f.signals, in_force.get((f.kind, f.key)))
        for f in flagged
    ]
