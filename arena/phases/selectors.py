"""What the phase engine knows: which transition is due, and what an agent may see of the votes.

The feedback policy lives here: an agent sees the battles of a phase only once a later phase's
policy has given them to it (a delivered `FeedbackBundle`), and then only the battles its own
model fought — never another agent's private data.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from arena.battles.export import battle_export_rows
from arena.competition.models import Phase
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import snapshot_latest
from arena.phases.models import AgentStepFailure, FeedbackBundle, PhaseContestant, WorkerFailure

# The state machine: each state, the next, and what makes the move due.
NEXT_STATE = {
    Phase.State.SCHEDULED: Phase.State.RUNNING,
    Phase.State.RUNNING: Phase.State.FROZEN,
    Phase.State.FROZEN: Phase.State.SERVING,
    Phase.State.SERVING: Phase.State.CLOSED,
}


def next_phase(phase: Phase) -> Phase | None:
    return (
        Phase.objects.filter(competition=phase.competition, number__gt=phase.number)
        .order_by("number")
        .first()
    )


def previous_phase(phase: Phase) -> Phase | None:
    return (
        Phase.objects.filter(competition=phase.competition, number__lt=phase.number)
        .order_by("-number")
        .first()
    )


def arena_closes_at(phase: Phase) -> datetime | None:
    """A phase's arena stays open until the next phase starts (its votes are that phase's
    feedback), or for the last phase until its own `arena_closes_at`, if set."""
    following = next_phase(phase)
    if following is not None:
        return following.starts_at
    return phase.arena_closes_at


def transition_due(phase: Phase, now: datetime) -> str | None:
    """The state `phase` should move to now, or None."""
    if phase.state == Phase.State.SCHEDULED and now >= phase.starts_at:
        return Phase.State.RUNNING
    if phase.state == Phase.State.RUNNING and now >= phase.ends_at:
        return Phase.State.FROZEN
    if phase.state == Phase.State.FROZEN:
        return Phase.State.SERVING
    if phase.state == Phase.State.SERVING:
        closes = arena_closes_at(phase)
        if closes is not None and now >= closes:
            return Phase.State.CLOSED
    return None


def phase_timeline(phase: Phase, now: datetime) -> tuple[str, datetime | None]:
    """What happens next to a phase, and when (None: when the engine next ticks, or never)."""
    if phase.state == Phase.State.SCHEDULED:
        return "starts", phase.starts_at
    if phase.state == Phase.State.RUNNING:
        return "freezes its nominations", phase.ends_at
    if phase.state == Phase.State.FROZEN:
        return "starts serving its nominated models", None
    if phase.state == Phase.State.SERVING:
        return "closes its arena", arena_closes_at(phase)
    return "is closed", None


def own_contestant_ids(*, agent_id: int, phase: Phase) -> list[int]:
    return list(
        PhaseContestant.objects.filter(phase=phase, nomination__agent_id=agent_id).values_list(
            "contestant_id", flat=True
        )
    )


def feedback_phase_for(*, agent_id: int, label: str | None = None) -> Phase | None:
    """The phase whose votes the agent has been given (the latest, or the one named), or None
    when no feedback policy has given it any."""
    bundles = FeedbackBundle.objects.filter(agent_id=agent_id).select_related("source_phase")
    if label is not None:
        bundles = bundles.filter(source_phase__label=label)
    bundle = bundles.order_by("-delivered_at").first()
    return bundle.source_phase if bundle is not None else None


def own_battles(*, agent_id: int, phase: Phase) -> list[dict[str, Any]]:
    """The counted battles of the agent's own model in `phase`, with prompts and both answers,
    in the battle export format."""
    own = own_contestant_ids(agent_id=agent_id, phase=phase)
    if not own:
        return []
    return list(battle_export_rows(phase=phase.label, contestant_ids=own))


def comparison_records(rows: list[dict[str, Any]], own_model: str) -> list[dict[str, Any]]:
    """Wins, losses and ties of `own_model` against each opponent it met."""
    tally: dict[str, Counter[str]] = {}
    for row in rows:
        own_side = "model_a" if row["model_a"] == own_model else "model_b"
        opponent = row["model_b"] if own_side == "model_a" else row["model_a"]
        if row["winner"] == own_side:
            outcome = "wins"
        elif row["winner"].startswith("tie"):
            outcome = "ties"
        else:
            outcome = "losses"
        tally.setdefault(opponent, Counter())[outcome] += 1
    return [
        {
            "opponent": opponent,
            "wins": counts["wins"],
            "losses": counts["losses"],
            "ties": counts["ties"],
        }
        for opponent, counts in sorted(tally.items())
    ]


def phase_leaderboard(
    phase: Phase, *, snapshot: RatingSnapshot | None = None
) -> dict[str, Any] | None:
    """The phase's published leaderboard (style-controlled and raw, with intervals), or the
    table `snapshot` of the phase's battles holds (one category's)."""
    if snapshot is None:
        snapshot = snapshot_latest(source=RatingSnapshot.Source.PHASE, phase=phase.label)
    if snapshot is None:
        return None
    return {
        "phase": phase.label,
        "category": snapshot.category or None,
        "computed_at": snapshot.created_at.isoformat(),
        "n_battles": snapshot.n_battles,
        "style_controlled": snapshot.style,
        "raw": snapshot.raw,
    }


def own_model_name(*, agent_id: int, phase: Phase) -> str | None:
    entry = (
        PhaseContestant.objects.filter(phase=phase, nomination__agent_id=agent_id)
        .select_related("contestant")
        .first()
    )
    return entry.contestant.display_name if entry is not None else None


def feedback_bundle(*, agent_id: int, phase: Phase) -> dict[str, Any]:
    """Everything an agent is given about its own model in `phase`."""
    own_model = own_model_name(agent_id=agent_id, phase=phase)
    rows = own_battles(agent_id=agent_id, phase=phase)
    return {
        "phase": phase.label,
        "own_model": own_model,
        "battles": rows,
        "comparisons": comparison_records(rows, own_model) if own_model else [],
        "leaderboard": phase_leaderboard(phase),
    }


def agent_step_failures_open() -> list[AgentStepFailure]:
    """Agents' steps of a phase's start that failed and have not succeeded since."""
    return list(AgentStepFailure.objects.filter(resolved_at=None).select_related("agent", "phase"))


def worker_failures_recent(*, since: datetime, limit: int = 10) -> list[WorkerFailure]:
    """The engine's latest failures since `since`, newest first."""
    return list(WorkerFailure.objects.filter(last_at__gte=since).select_related("phase")[:limit])
