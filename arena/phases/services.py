"""The phase engine: moves every phase along scheduled → running → frozen → serving → closed.

`phases_tick` is idempotent and safe to run every minute from cron or a worker loop, and safe
under concurrent runs: each move happens inside a transaction holding the phase's row lock,
re-checks the state after taking it, and is recorded under a unique (phase, state) constraint —
so two ticks never do a transition twice. What a move does outside the database (Slurm limits,
files in sandboxes) is idempotent, so a move that failed half-way is simply retried.

Agents are untrusted, and one agent's sandbox or account must never stop the engine: at a
phase's start each agent's steps (its limits, its feedback) run on their own, and one that
fails is recorded against that agent (`AgentStepFailure`) and retried by later ticks while the
others and the transition go on. The start resets GPU usage once, with the transition; a retry
never resets it again. A phase whose move fails for any other reason is recorded
(`WorkerFailure`) and tried again next tick, and the other phases still move.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.credit import credit_phase_grant
from agents.models import Agent, Nomination, NomineeCopy
from agents.nominees import nominee_copy_make, nominee_copy_refuse
from agents.sandboxes import UnixSandboxes
from arena.competition.models import Competition, Phase
from arena.competition.selectors import phase_account_limits, phase_in_arena
from arena.leaderboard.services import phase_leaderboard_fit
from arena.phases.models import (
    AgentStepFailure,
    FeedbackBundle,
    PhaseContestant,
    PhaseTransition,
    WorkerFailure,
)
from arena.phases.selectors import feedback_bundle, previous_phase, transition_due
from arena.serving.models import Contestant
from cluster.backends.base import ClusterBackend
from cluster.services import account_ensure
from evalsuite.models import EvalRun
from evalsuite.services import evaluations_queue

log = logging.getLogger(__name__)

REFERENCE_NAMES = {"base": "reference-base", "instruct": "reference-instruct"}


@dataclass
class Engine:
    """What the moves act on; the defaults come from settings."""

    cluster: ClusterBackend | None = None
    sandboxes: UnixSandboxes | None = None

    def sandboxes_or_default(self) -> UnixSandboxes:
        return self.sandboxes or UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)


def phases_tick(
    *, now: datetime | None = None, engine: Engine | None = None
) -> list[PhaseTransition]:
    """Make every transition that is due, oldest phase first, each exactly once. First, the
    agents' steps that failed at an earlier tick are tried again."""
    now = now or timezone.now()
    engine = engine or Engine()
    agent_steps_retry(engine=engine)
    made = []
    for phase_id in Phase.objects.order_by("competition_id", "number").values_list("pk", flat=True):
        try:
            while (transition := _advance(phase_id, now, engine)) is not None:
                log.info(
                    "%s: %s -> %s",
                    transition.phase.label,
                    transition.from_state,
                    transition.to_state,
                )
                made.append(transition)
        except Exception as error:  # one phase's failed move must not hold up the others
            log.exception("moving phase %s failed; the next tick tries again", phase_id)
            worker_failure_record(task="move", error=error, phase_id=phase_id)
    return made


def _advance(phase_id: int, now: datetime, engine: Engine) -> PhaseTransition | None:
    with transaction.atomic():
        phase = Phase.objects.select_for_update().get(pk=phase_id)
        target = transition_due(phase, now)
        if target is None:
            return None
        detail = MOVES[target](phase, engine)
        transition = PhaseTransition.objects.create(
            phase=phase, from_state=phase.state, to_state=target, detail=detail
        )
        Phase.objects.filter(pk=phase.pk).update(state=target)
        phase.state = target
        return transition


# --- the moves -------------------------------------------------------------------------------
def _start(phase: Phase, engine: Engine) -> dict[str, Any]:
    """The phase's API credit for every agent; then, agent by agent, the phase's limits on its
    Slurm association (usage starts again from zero) and the feedback the phase's policy
    gives. One agent's failed step is recorded against it and never stops the others."""
    agents = list(
        Agent.objects.filter(active=True, cluster_account__isnull=False).select_related(
            "cluster_account"
        )
    )
    # The phase's credit on top of what was spent before; calls in flight keep their
    # reservations, and give back what they leave unused to the old phase, not this one. Once,
    # with the transition: a retry later in the phase would add what was spent since.
    credit_phase_grant(agent_ids=[agent.pk for agent in agents], amount=phase.api_credit_usd)
    budgeted = [a for a in agents if _agent_step(phase, a, AgentStepFailure.Step.BUDGET, engine)]  # type: ignore[arg-type]  # TextChoices member: a str at run time
    delivered = []
    if phase.feedback == Phase.Feedback.OWN_BATTLES and previous_phase(phase) is not None:
        delivered = [
            a
            for a in agents
            if _agent_step(phase, a, AgentStepFailure.Step.FEEDBACK, engine)  # type: ignore[arg-type]  # TextChoices member: a str at run time
        ]
    failed = AgentStepFailure.objects.filter(phase=phase, resolved_at=None)
    return {
        "agents_budgeted": len(budgeted),
        "feedback_bundles": len(delivered),
        "agents_failed": [
            {"agent": f.agent.name, "step": f.step, "error": f.error}
            for f in failed.select_related("agent")
        ],
    }


def phase_limits_reapply(*, phase: Phase, engine: Engine | None = None) -> list[str]:
    """Put a running phase's limits, changed since it started, on every active agent's
    account, each agent's step on its own as at the start (a failure is recorded and retried
    by later ticks). Same period, so nobody's usage is reset. The agents that failed."""
    engine = engine or Engine()
    agents = Agent.objects.filter(active=True, cluster_account__isnull=False).select_related(
        "cluster_account"
    )
    return [
        agent.name
        for agent in agents
        if not _agent_step(phase, agent, AgentStepFailure.Step.BUDGET, engine)  # type: ignore[arg-type]  # TextChoices member: a str at run time
    ]


def _budget_step(phase: Phase, agent: Agent, engine: Engine) -> bool:
    """The phase's limits on the agent's Slurm association. Its usage is reset only when the
    account's budget period changes, and the new period is saved with this step, so a retry
    of a step that got that far resets nothing."""
    if agent.cluster_account is None:  # the moves take only agents with one
        raise ValueError(f"agent {agent.name} has no cluster account")
    account_ensure(
        name=agent.cluster_account.name,
        unix_user=agent.unix_user,
        period=phase.label,
        limits=phase_account_limits(phase),
        storage_gib=phase.storage_gib,
        storage_path=Path(agent.sandbox) if agent.sandbox else None,
        backend=engine.cluster,
    )
    return True


def _feedback_step(phase: Phase, agent: Agent, engine: Engine) -> bool:
    source = previous_phase(phase)
    if source is None:
        return False
    return feedback_deliver(agent=agent, phase=phase, source=source, engine=engine)


AGENT_STEPS: dict[str, Callable[[Phase, Agent, Engine], bool]] = {
    AgentStepFailure.Step.BUDGET: _budget_step,  # type: ignore[dict-item]  # TextChoices member: a str at run time
    AgentStepFailure.Step.FEEDBACK: _feedback_step,  # type: ignore[dict-item]  # TextChoices member: a str at run time
}


def _agent_step(phase: Phase, agent: Agent, step: str, engine: Engine) -> bool:
    """One agent's step of the phase's start, in a savepoint of its own: if it fails, what it
    wrote to the database is rolled back alone, the failure is recorded against the agent,
    and the start goes on. True if the step did something, False if there was nothing to do
    or it failed."""
    try:
        with transaction.atomic():
            done = AGENT_STEPS[step](phase, agent, engine)
    except Exception as error:  # anything an agent's sandbox or account can make happen
        log.warning("%s: %s failed for %s: %s", phase.label, step, agent.name, error)
        agent_step_failure_record(phase=phase, agent=agent, step=step, error=error)
        return False
    AgentStepFailure.objects.filter(phase=phase, agent=agent, step=step, resolved_at=None).update(
        resolved_at=timezone.now()
    )
    return done


def agent_step_failure_record(
    *, phase: Phase, agent: Agent, step: str, error: BaseException
) -> AgentStepFailure:
    """Record (or count again) that `step` failed for `agent` in `phase`."""
    text = _error_text(error)
    failure, created = AgentStepFailure.objects.get_or_create(
        phase=phase, agent=agent, step=step, defaults={"error": text}
    )
    if not created:
        AgentStepFailure.objects.filter(pk=failure.pk).update(
            error=text,
            attempts=F("attempts") + 1,
            last_failed_at=timezone.now(),
            resolved_at=None,
        )
    return failure


def agent_steps_retry(*, engine: Engine | None = None) -> list[AgentStepFailure]:
    """Try again each agent's step that failed in a phase that still runs (after the agent
    repaired its sandbox, or the scheduler came back); the failures now resolved. Each is
    claimed under its row lock, so concurrent ticks never run the same retry twice."""
    engine = engine or Engine()
    resolved = []
    pending = AgentStepFailure.objects.filter(
        resolved_at=None, phase__state=Phase.State.RUNNING, agent__active=True
    ).values_list("pk", flat=True)
    for pk in list(pending):
        with transaction.atomic():
            failure = (
                AgentStepFailure.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(pk=pk, resolved_at=None)
                .select_related("phase", "agent")
                .first()
            )
            if failure is None:
                continue
            _agent_step(failure.phase, failure.agent, failure.step, engine)
            failure.refresh_from_db()
            if failure.resolved_at is not None:
                resolved.append(failure)
    return resolved


def worker_failure_record(
    *, task: str, error: BaseException, phase_id: int | None = None
) -> WorkerFailure | None:
    """Record a failed part of the engine's work, for the organizers' dashboard; the same
    failure as the last one of its task is counted on that row. Never raises: it is called
    where something already failed, perhaps the database itself."""
    text = _error_text(error)
    try:
        last = WorkerFailure.objects.filter(task=task, phase_id=phase_id).first()
        if last is not None and last.error == text:
            WorkerFailure.objects.filter(pk=last.pk).update(
                repeats=F("repeats") + 1, last_at=timezone.now()
            )
            return last
        return WorkerFailure.objects.create(task=task, phase_id=phase_id, error=text)
    except Exception:  # the log keeps it when the database cannot
        log.exception("recording the failure of %s failed", task)
        return None


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:4000]


def _freeze(phase: Phase, engine: Engine) -> dict[str, Any]:
    nominations = Nomination.objects.filter(phase=phase).select_related("agent", "checkpoint")
    return {
        "nominations": [
            {"agent": n.agent.name, "checkpoint": n.checkpoint_id, "path": n.checkpoint.path}
            for n in nominations
        ]
    }


def _serve(phase: Phase, engine: Engine) -> dict[str, Any]:
    """Each nominated checkpoint becomes a contestant, with the reference models; only they
    stay in the arena. Those with an endpoint are active now; local checkpoints wait for a
    serving worker (`ArenaServers`) to start their model server.

    A nominee is served from the platform's own copy of its checkpoint, made here, as the
    nominations freeze (agents/nominees.py), never from the agent's sandbox. A copy that
    cannot be made is recorded against that nomination alone (not servable, with the reason);
    its contestant is listed but never served, and the others go on."""
    entries = [
        _reference_entry(phase, role, path)
        for role, path in (
            ("base", phase.competition.base_model),
            ("instruct", phase.competition.instruct_model),
        )
        if path
    ]
    not_servable = {}
    for nomination in Nomination.objects.filter(phase=phase).select_related("agent", "checkpoint"):
        copy = _nominee_copy(nomination)
        if copy.not_servable_reason:
            not_servable[nomination.agent.name] = copy.not_servable_reason
        display_name = f"{nomination.agent.name}-{phase.label}"
        contestant, _ = Contestant.objects.get_or_create(
            display_name=display_name,
            defaults={
                "base_url": "",
                "served_model_name": display_name,
                "checkpoint_path": copy.folder,
                "active": False,
            },
        )
        if contestant.checkpoint_path != copy.folder and not contestant.base_url:
            Contestant.objects.filter(pk=contestant.pk).update(checkpoint_path=copy.folder)
        entry, _ = PhaseContestant.objects.get_or_create(
            phase=phase,
            contestant=contestant,
            defaults={
                "role": PhaseContestant.Role.NOMINEE,
                "nomination": nomination,
                "checkpoint_path": copy.folder,
            },
        )
        entries.append(entry)
    in_phase = [entry.contestant_id for entry in entries]
    Contestant.objects.exclude(pk__in=in_phase).update(active=False)
    Contestant.objects.filter(pk__in=in_phase).exclude(base_url="").update(active=True)
    detail: dict[str, Any] = {"contestants": [entry.contestant.display_name for entry in entries]}
    if not_servable:
        detail["not_servable"] = not_servable
    return detail


def _nominee_copy(nomination: Nomination) -> NomineeCopy:
    """The nomination's copy in the nominee store; whatever goes wrong making it is that
    nomination's failure alone, in a savepoint of its own."""
    try:
        with transaction.atomic():
            return nominee_copy_make(nomination=nomination)
    except Exception as error:  # the store itself, the database: recorded, never fatal
        log.exception("copying the nomination of %s failed", nomination.agent.name)
        copy, _ = NomineeCopy.objects.get_or_create(nomination=nomination)
        nominee_copy_refuse(copy=copy, reason=f"the copy failed: {_error_text(error)}")
        return copy


def _reference_entry(phase: Phase, role: str, path: str) -> PhaseContestant:
    contestant, _ = Contestant.objects.get_or_create(
        display_name=REFERENCE_NAMES[role],
        defaults={
            "base_url": "",
            "served_model_name": path,
            "checkpoint_path": path,
            "active": False,
        },
    )
    entry, _ = PhaseContestant.objects.get_or_create(
        phase=phase,
        contestant=contestant,
        defaults={"role": PhaseContestant.Role.REFERENCE, "checkpoint_path": path},
    )
    return entry


def _close(phase: Phase, engine: Engine) -> dict[str, Any]:
    """The phase's votes are final: fit and publish its leaderboard."""
    snapshot = phase_leaderboard_fit(phase=phase.label)
    return {"n_battles": snapshot.n_battles if snapshot else 0}


MOVES: dict[str, Callable[[Phase, Engine], dict[str, Any]]] = {
    Phase.State.RUNNING: _start,
    Phase.State.FROZEN: _freeze,
    Phase.State.SERVING: _serve,
    Phase.State.CLOSED: _close,
}


# --- feedback --------------------------------------------------------------------------------
def feedback_deliver(*, agent: Agent, phase: Phase, source: Phase, engine: Engine) -> bool:
    """Give `agent` what `phase`'s policy allows about its own model in `source`: through the
    API (the bundle row opens it) and as files in its sandbox. False if it had no model there."""
    bundle = feedback_bundle(agent_id=agent.pk, phase=source)
    if bundle["own_model"] is None:
        return False
    folder = Path(agent.sandbox) / "feedback" / source.label
    files = {
        "battles.jsonl": "".join(
            json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in bundle["battles"]
        ),
        "leaderboard.json": json.dumps(bundle["leaderboard"], indent=2) + "\n",
        "comparisons.json": json.dumps(
            {"own_model": bundle["own_model"], "comparisons": bundle["comparisons"]}, indent=2
        )
        + "\n",
        "README.md": _feedback_readme(bundle),
    }
    sandboxes = engine.sandboxes_or_default()
    for name, content in files.items():
        sandboxes.write_private(agent.unix_user, folder / name, content)
    FeedbackBundle.objects.update_or_create(
        phase=phase,
        agent=agent,
        defaults={"source_phase": source, "battles": len(bundle["battles"]), "folder": str(folder)},
    )
    return True


def _feedback_readme(bundle: dict[str, Any]) -> str:
    return (
        f"# Feedback on {bundle['own_model']} ({bundle['phase']})\n\n"
        f"- `battles.jsonl`: the {len(bundle['battles'])} counted battles your model fought, with"
        " the prompt and both answers (Chatbot Arena clean-battle format).\n"
        "- `comparisons.json`: your wins, losses and ties against each opponent.\n"
        "- `leaderboard.json`: the phase's leaderboard, style-controlled and raw, with intervals.\n\n"
        "The same data: `arena-agent votes export` and `arena-agent leaderboard`.\n"
    )


def competition_plan(
    *,
    name: str,
    base_model: str,
    instruct_model: str,
    starts_at: datetime,
    phase_lengths: list[timedelta],
    arena_length: timedelta,
) -> Competition:
    """A competition whose phases follow each other: each trains for its length, then its
    arena runs for `arena_length` before the next begins (the first phase gives no votes, each
    later one gives every agent the battles of its own model in the phase before)."""
    if not phase_lengths:
        raise ValueError("a competition needs at least one phase")
    if min(phase_lengths) <= timedelta(0) or arena_length <= timedelta(0):
        raise ValueError("phase and arena lengths must be positive")
    with transaction.atomic():
        competition = Competition.objects.create(
            name=name, base_model=base_model, instruct_model=instruct_model
        )
        start = starts_at
        for number, length in enumerate(phase_lengths, 1):
            end = start + length
            Phase.objects.create(
                competition=competition,
                number=number,
                label=f"phase-{number}",
                starts_at=start,
                ends_at=end,
                arena_closes_at=end + arena_length,
                feedback=Phase.Feedback.NONE if number == 1 else Phase.Feedback.OWN_BATTLES,
            )
            start = end + arena_length
    return competition


# --- the organizer moving the calendar (the demo ends each phase once all have nominated) ---
def phase_end_early(*, phase: Phase, now: datetime | None = None) -> None:
    """End a running phase's training now: the next tick freezes it and opens its arena. A
    phase that has not begun, or has already ended, is left as it is."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Phase.objects.select_for_update().get(pk=phase.pk)
        if locked.starts_at > now:
            raise ValueError(f"{locked.label} has not begun: it cannot end before it starts")
        Phase.objects.filter(pk=locked.pk, ends_at__gt=now).update(ends_at=now)


def phase_arena_close_early(*, phase: Phase, now: datetime | None = None) -> None:
    """Close a phase's arena now: the next phase of its competition starts now, keeping its
    length (the arena closes when the next phase starts), or, after the last phase, its arena
    closes now."""
    now = now or timezone.now()
    with transaction.atomic():
        following = (
            Phase.objects.select_for_update()
            .filter(competition_id=phase.competition_id, number=phase.number + 1)
            .first()
        )
        if following is None:
            Phase.objects.filter(pk=phase.pk).update(arena_closes_at=now)
            return
        length = following.ends_at - following.starts_at
        Phase.objects.filter(pk=following.pk).update(starts_at=now, ends_at=now + length)


def evaluations_queue_served(
    *, max_tokens: int = 512, backend: ClusterBackend | None = None
) -> list[Any]:
    """Queue the evaluation suite once for each contestant of the phase in the arena, as soon
    as it is served (an evaluation needs its endpoint). Idempotent, and safe under concurrent
    calls: the phase row is locked while deciding."""
    phase = phase_in_arena()
    if phase is None:
        return []
    with transaction.atomic():
        Phase.objects.select_for_update().get(pk=phase.pk)
        served = [
            entry.contestant
            for entry in PhaseContestant.objects.filter(phase=phase, contestant__active=True)
            .exclude(contestant__base_url="")
            .select_related("contestant")
        ]
        evaluated = set(EvalRun.objects.filter(phase=phase).values_list("contestant_id", flat=True))
        todo = [contestant for contestant in served if contestant.pk not in evaluated]
        if not todo:
            return []
        return evaluations_queue(
            phase=phase,
            contestants=todo,
            # The benchmarks the competition file declares; none declared: the whole registry.
            benchmark_names=list(phase.competition.benchmarks) or None,
            max_tokens=max_tokens,
            backend=backend,
        )
