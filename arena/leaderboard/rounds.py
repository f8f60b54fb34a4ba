"""Each targeted round's result: how far it got, its tally, and its own fit.

A round is read on its own votes only — the ones the leaderboard fits on (`votes_in_fit`:
counted, cast by no excluded voter) among the round's battles — with the two models alone,
raw and style-controlled (`arena.rating.pair`). Its contestants are named A and B as the
organizer ordered them, whatever side each battle put them on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import QuerySet

from arena.battles.export import CHOICE_TO_WINNER
from arena.battles.models import Answer, Battle, TargetedRound, Vote
from arena.battles.selectors import votes_in_fit
from arena.rating import Battles
from arena.rating.pair import PairFit, pair_fit

ROUND_BOOTSTRAP_ROUNDS = 200  # as a phase's fit; a round's few votes make each round cheap


@dataclass(frozen=True)
class RoundTally:
    """The round's votes in the fit, from A's side: a one-sided leak counts as the leaker's
    loss whatever the vote, as in the fit and the export."""

    wins_a: int
    wins_b: int
    ties: int
    both_bad: int

    @property
    def votes(self) -> int:
        return self.wins_a + self.wins_b + self.ties + self.both_bad

    def words(self) -> str:
        """ "39 wins to 18 in 65 battles", as the study reports a round."""
        return f"{self.wins_a} wins to {self.wins_b} in {self.votes} battles"


@dataclass(frozen=True)
class RoundResult:
    round_id: int
    tag: str
    model_a: str
    model_b: str
    note: str
    created_at: Any
    scheduled: int  # battles the organizer ordered
    served: int  # battles started for the round
    completed: int  # of those, both answers in: a voter could vote
    voted: int  # votes cast on them
    in_fit: int  # votes the fit reads: counted, from voters not excluded
    not_counted: int  # votes on void battles (both sides revealed an identity)
    excluded: int  # counted votes from excluded voters
    tally: RoundTally
    raw: PairFit
    style: PairFit

    @property
    def open(self) -> bool:
        return self.served < self.scheduled

    def headline(self) -> str:
        tally = self.tally
        extra = ", ".join(
            part
            for part in (
                f"{tally.ties} tie{'s' * (tally.ties != 1)}" if tally.ties else "",
                f"{tally.both_bad} both bad" if tally.both_bad else "",
            )
            if part
        )
        return f"{self.model_a} {tally.words()}" + (f" ({extra})" if extra else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round_id,
            "tag": self.tag,
            "model_a": self.model_a,
            "model_b": self.model_b,
            "note": self.note,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "open": self.open,
            "battles": {
                "scheduled": self.scheduled,
                "served": self.served,
                "completed": self.completed,
                "voted": self.voted,
                "in_fit": self.in_fit,
                "not_counted": self.not_counted,
                "excluded": self.excluded,
            },
            "tally": {
                "wins_a": self.tally.wins_a,
                "wins_b": self.tally.wins_b,
                "ties": self.tally.ties,
                "both_bad": self.tally.both_bad,
                "votes": self.tally.votes,
                "words": self.headline(),
            },
            "raw": self.raw.to_json(),
            "style": self.style.to_json(),
        }


def targeted_round_results(
    *,
    bootstrap_rounds: int = ROUND_BOOTSTRAP_ROUNDS,
    seed: int = 0,
    newest: int | None = None,
) -> list[RoundResult]:
    """Every targeted round's result, oldest first (the `newest` N only, if given)."""
    rounds = TargetedRound.objects.select_related("contestant_a", "contestant_b")
    chosen = list(rounds.order_by("-created_at", "-id")[:newest]) if newest else list(rounds)
    chosen.sort(key=lambda r: (r.created_at, r.pk))
    return [targeted_round_result(r, bootstrap_rounds=bootstrap_rounds, seed=seed) for r in chosen]


def targeted_round_result(
    targeted: TargetedRound, *, bootstrap_rounds: int = ROUND_BOOTSTRAP_ROUNDS, seed: int = 0
) -> RoundResult:
    model_a = targeted.contestant_a.display_name
    model_b = targeted.contestant_b.display_name
    battles = Battle.objects.filter(targeted_round=targeted)
    votes = Vote.objects.filter(battle__targeted_round=targeted)
    fitted = votes_in_fit().filter(battle__targeted_round=targeted)
    in_fit = fitted.count()
    tally, pair = _round_battles(targeted, fitted)
    options = {"model_a": model_a, "model_b": model_b, "bootstrap_rounds": bootstrap_rounds}
    return RoundResult(
        round_id=targeted.pk,
        tag=targeted.tag,
        model_a=model_a,
        model_b=model_b,
        note=targeted.note,
        created_at=targeted.created_at,
        scheduled=targeted.battles_wanted,
        served=targeted.battles_served,
        completed=battles.filter(state=Battle.State.COMPLETE).count(),
        voted=votes.count(),
        in_fit=in_fit,
        not_counted=votes.filter(counted=False).count(),
        excluded=votes.filter(counted=True).count() - in_fit,
        tally=tally,
        raw=pair_fit(pair, style=False, seed=seed, **options),
        style=pair_fit(pair, style=True, seed=seed, **options),
    )


def _round_battles(
    targeted: TargetedRound, fitted: QuerySet[Vote]
) -> tuple[RoundTally, Battles | None]:
    """The tally and the battles for the fit, read from the same votes."""
    rows = list(
        fitted.order_by("created_at", "battle_id").values_list(
            "battle_id", "choice", "battle__leaked_sides"
        )
    )
    sides: dict[str, dict[str, tuple[int, list[float]]]] = {}
    answers = Answer.objects.filter(battle_id__in=[r[0] for r in rows]).values_list(
        "battle_id", "side", "contestant_id", "tokens", "header_counts", "list_counts",
        "bold_counts",
    )  # fmt: skip
    for battle_id, side, contestant_id, tokens, headers, lists, bold in answers:
        sides.setdefault(battle_id, {})[side] = (
            contestant_id,
            [tokens, sum(headers.values()), sum(lists.values()), sum(bold.values())],
        )
    names = {
        targeted.contestant_a_id: targeted.contestant_a.display_name,
        targeted.contestant_b_id: targeted.contestant_b.display_name,
    }
    counts = {"a": 0, "b": 0, "tie": 0, "bothbad": 0}
    model_a, model_b, winner, style_a, style_b = [], [], [], [], []
    for battle_id, choice, leaked_sides in rows:
        a, b = sides[battle_id]["a"], sides[battle_id]["b"]
        if {a[0], b[0]} != set(names):
            continue  # not the round's pair: rounds only ever pair their own two (a guard)
        decided = Battle(leaked_sides=leaked_sides).forced_winner or choice
        if decided in ("a", "b"):
            won_by = a[0] if decided == "a" else b[0]
            counts["a" if won_by == targeted.contestant_a_id else "b"] += 1
        else:
            counts[decided] += 1
        model_a.append(names[a[0]])
        model_b.append(names[b[0]])
        winner.append(CHOICE_TO_WINNER[decided])
        style_a.append(a[1])
        style_b.append(b[1])
    tally = RoundTally(counts["a"], counts["b"], counts["tie"], counts["bothbad"])
    if not winner:
        return tally, None
    battles = Battles.build(
        model_a,
        model_b,
        winner,
        style_a=np.array(style_a, dtype=np.float64),
        style_b=np.array(style_b, dtype=np.float64),
    )
    return tally, battles


def round_report_lines(result: RoundResult) -> list[str]:
    """A round's result as `battles target --report` prints it."""
    a, b = result.model_a, result.model_b
    state = f"open, {result.served} of {result.scheduled} served" if result.open else "complete"
    note = f" — {result.note}" if result.note else ""
    left_out = ", ".join(
        part
        for part in (
            f"{result.not_counted} void" if result.not_counted else "",
            f"{result.excluded} from excluded voters" if result.excluded else "",
        )
        if part
    )
    lines = [
        f"{result.tag}: {a} (A) vs {b} (B){note} [{state}]",
        f"  battles: {result.scheduled} scheduled, {result.served} served, "
        f"{result.completed} completed, {result.voted} voted, {result.in_fit} in the fit"
        + (f" ({left_out} left out)" if left_out else ""),
        f"  tally: {result.headline()}",
    ]
    for fit in (result.raw, result.style):
        lines.append(f"  {fit.method}: {fit_summary(fit)}")
        lines.extend(f"    note: {note}" for note in fit.notes)
    return lines


def fit_summary(fit: PairFit) -> str:
    """One fit in a line: the gap with its interval, P(A above B), the verdict."""
    if not fit.determined:
        return f"not determined: {fit.reason}"
    assert fit.gap is not None and fit.gap_interval is not None
    assert fit.interval_a is not None and fit.interval_b is not None
    assert fit.score_a is not None and fit.score_b is not None
    assert fit.a_above_b is not None and fit.a_beats_b is not None
    low, high = fit.gap_interval
    share, condition = (
        ("wins", " at equal style") if fit.style_controlled else ("takes", " of the points")
    )
    return (
        f"gap {fit.gap:+.0f} points ({fit.confidence:.0%} interval {low:+.0f} to {high:+.0f}); "
        f"P({fit.model_a} above {fit.model_b}) = {fit.a_above_b:.2f}; "
        f"{fit.model_a} {fit.score_a:.0f} [{fit.interval_a[0]:.0f}, {fit.interval_a[1]:.0f}], "
        f"{fit.model_b} {fit.score_b:.0f} [{fit.interval_b[0]:.0f}, {fit.interval_b[1]:.0f}]; "
        f"{fit.model_a} {share} {fit.a_beats_b:.0%}{condition}; {fit.verdict}"
    )
