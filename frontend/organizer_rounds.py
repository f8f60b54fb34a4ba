"""The dashboard's targeted rounds: one section per round with its tally and its own fit,
raw and style-controlled (`arena.leaderboard.rounds`). Cells are plain text; the template
escapes them (a contestant's name and the round's note included)."""

from __future__ import annotations

from arena.leaderboard.rounds import RoundResult, targeted_round_results
from arena.rating.pair import PairFit
from frontend.organizer import OrganizerSection

# Each round is fitted on a page view: 200 bootstrap rounds raw and 200 style-controlled
# took 0.3 s and 1.0 s for a 65-vote round on this busy 2-core machine, so the page shows the
# newest rounds only; `battles target --report` shows them all.
ROUNDS_SHOWN = 10
COLUMNS = ["Fit", "Model A", "Model B", "Gap A − B", "P(A above B)", "Result"]


def targeted_round_sections() -> list[OrganizerSection]:
    results = targeted_round_results(newest=ROUNDS_SHOWN)
    return [_section(result) for result in reversed(results)]  # newest first


def _section(result: RoundResult) -> OrganizerSection:
    left_out = result.voted - result.in_fit
    state = (
        f"Open: {result.served} of {result.scheduled} battles served"
        if result.open
        else f"All {result.scheduled} battles served"
    )
    note = (
        f"{result.headline()}. {state}, {result.completed} completed, {result.voted} voted, "
        f"{result.in_fit} in the fit"
        + (f" ({left_out} void or from excluded voters)" if left_out else "")
        + ". Only the round's votes and its two models; intervals from "
        f"{result.raw.confidence:.0%} bootstrap percentiles."
    )
    if result.note:
        note += f" Organizer's note: {result.note}"
    return OrganizerSection(
        title=f"Targeted round {result.round_id}: {result.model_a} vs {result.model_b}",
        columns=COLUMNS,
        rows=[_row(result.raw), _row(result.style)],
        note=note,
    )


def _row(fit: PairFit) -> list[str]:
    if not fit.determined:
        return [fit.method, "—", "—", "—", "—", f"not determined: {fit.reason}"]
    assert fit.score_a is not None and fit.interval_a is not None
    assert fit.score_b is not None and fit.interval_b is not None
    assert fit.gap is not None and fit.gap_interval is not None and fit.a_above_b is not None
    return [
        fit.method,
        f"{fit.model_a} {_score(fit.score_a, fit.interval_a)}",
        f"{fit.model_b} {_score(fit.score_b, fit.interval_b)}",
        f"{fit.gap:+.0f} ({fit.gap_interval[0]:+.0f} to {fit.gap_interval[1]:+.0f})",
        f"{fit.a_above_b:.2f}",
        fit.verdict + "".join(f"; {note}" for note in fit.notes),
    ]


def _score(score: float, interval: tuple[float, float]) -> str:
    return f"{score:.0f} ({interval[0]:.0f} to {interval[1]:.0f})"
