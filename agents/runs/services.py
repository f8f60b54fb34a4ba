"""Start, stop and supervise agent runs.

`run_start` records a run and starts its first attempt; `run_stop` asks it to end;
`runs_supervise` (each tick of the phases worker, or `agents supervise`) adopts the keepers
that are alive, restarts crashed attempts with a backoff until `max_restarts`, stops runs at
their deadline and at their phase's freeze, and starts the runs a running phase's competition
declares. Every change of state is a conditional UPDATE on the state it was decided from, so
two supervisors (or a supervisor and a keeper) never both act on one attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from agents.credit import scaffold_budget_set
from agents.models import Agent
from agents.runs.folders import run_folder, run_folder_fresh, status_read, status_write
from agents.runs.limits import RunLimitValues, limits_for
from agents.runs.models import AgentRun
from agents.runs.processes import alive, start_time
from agents.services import scaffold_tokens_revoke
from arena.competition.models import CompetitionAgent, Phase

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 600.0
FROZEN_OR_LATER = (Phase.State.FROZEN, Phase.State.SERVING, Phase.State.CLOSED)

# Keepers this process started: polled so that one which has ended is reaped (not a zombie).
_spawned: dict[int, subprocess.Popen[bytes]] = {}
# Runs whose live keeper this process has already seen (to report an adoption once).
_seen_alive: set[tuple[int, int]] = set()


class RunRefused(ValueError):
    """A run that cannot start or stop, said in words an organizer can act on."""


@dataclass(frozen=True)
class RunChange:
    run_id: int
    agent: str
    what: str  # started, restarted, adopted, crashed, failed, stopping, stopped, error
    detail: str = ""

    def __str__(self) -> str:
        return f"run {self.run_id} ({self.agent}): {self.what}" + (
            f": {self.detail}" if self.detail else ""
        )


def run_start(
    *,
    agent: Agent,
    harness: str,
    model: str = "",
    command: list[str] | None = None,
    cpus: float | None = None,
    memory_mib: int | None = None,
    max_processes: int | None = None,
    hours: float | None = None,
    max_restarts: int | None = None,
    phase: Phase | None = None,
) -> AgentRun:
    """Record a run of `agent` and start its first attempt. Its deadline is `hours` from now,
    else its phase's end, else AGENTS_RUNS_DEFAULT_HOURS from now."""
    command = list(command or [])
    if harness not in AgentRun.Harness.values:
        raise RunRefused(f"harness {harness!r}: arena or command")
    if harness == AgentRun.Harness.COMMAND and not command:
        raise RunRefused("a `command` run needs the command to run (--command ARGV...)")
    if not all(isinstance(part, str) and "\0" not in part for part in command):
        raise RunRefused("the command is a list of strings without NUL bytes")
    if not agent.active or not agent.unix_user or not agent.sandbox:
        raise RunRefused(f"agent {agent.name} is not provisioned and active")
    now = timezone.now()
    if hours is not None:
        deadline = now + timedelta(hours=hours)
    elif phase is not None:
        deadline = phase.ends_at
    else:
        deadline = now + timedelta(hours=settings.AGENTS_RUNS_DEFAULT_HOURS)
    if deadline <= now:
        raise RunRefused(f"the run's deadline {deadline:%Y-%m-%d %H:%M} UTC has passed")
    try:
        with transaction.atomic():
            run = AgentRun.objects.create(
                agent=agent,
                phase=phase,
                harness=harness,
                model=model,
                command=command,
                cpus=cpus or settings.AGENTS_RUNS_DEFAULT_CPUS,
                memory_mib=memory_mib or settings.AGENTS_RUNS_DEFAULT_MEMORY_MIB,
                max_processes=max_processes or settings.AGENTS_RUNS_DEFAULT_PROCESSES,
                max_restarts=(
                    settings.AGENTS_RUNS_DEFAULT_MAX_RESTARTS
                    if max_restarts is None
                    else max_restarts
                ),
                deadline=deadline,
            )
    except IntegrityError:
        raise RunRefused(f"agent {agent.name} already has a run that has not ended") from None
    run_folder_fresh(settings.AGENTS_RUNS_DIR, run.pk)
    _attempt_start(run)
    run.refresh_from_db()
    return run


def run_stop(*, agent: Agent, reason: str = "stopped by an organizer") -> AgentRun:
    """Ask the agent's unfinished run to end. Its keeper ends every process of the attempt
    and records it; a run with no live keeper is closed here and now."""
    run = AgentRun.objects.filter(agent=agent, state__in=AgentRun.UNFINISHED).first()
    if run is None:
        raise RunRefused(f"agent {agent.name} has no run that has not ended")
    _stop_request(run, reason)
    run.refresh_from_db()
    return run


def runs_supervise(now: datetime | None = None) -> list[RunChange]:
    """One round over every unfinished run, then the runs a running phase should have.
    One run's failure here is recorded as its change and never stops the others."""
    now = now or timezone.now()
    _reap()
    changes: list[RunChange] = []
    unfinished = AgentRun.objects.filter(state__in=AgentRun.UNFINISHED).select_related(
        "agent", "phase"
    )
    for run in unfinished:
        try:
            change = _supervise(run, now)
        except Exception as error:
            log.exception("supervising run %s failed", run.pk)
            change = RunChange(run.pk, run.agent.name, "error", f"{type(error).__name__}: {error}")
        if change is not None:
            changes.append(change)
    changes.extend(_autostart(now))
    return changes


def keeper_spawn(run_id: int) -> subprocess.Popen[bytes]:
    """The keeper of the run's next attempt, detached: its own session, output to the run's
    platform-owned folder. It survives this process."""
    folder = run_folder(settings.AGENTS_RUNS_DIR, run_id)
    with open(folder / "keeper.log", "ab") as output:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "agents.runs.keeper", str(run_id)],
            cwd=settings.BASE_DIR,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "arena.settings"},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _spawned[run_id] = keeper
    return keeper


def backoff_seconds(attempts: int) -> float:
    return float(min(MAX_BACKOFF_S, settings.AGENTS_RUNS_BACKOFF_S * 2 ** max(0, attempts - 1)))


# --- one run ------------------------------------------------------------------------------
def _supervise(run: AgentRun, now: datetime) -> RunChange | None:
    name = run.agent.name
    if run.stop_requested_at is None:
        reason = ""
        if not run.agent.active:
            reason = "the agent was deprovisioned"
        elif now >= run.deadline:
            reason = "its deadline passed"
        elif run.phase is not None and run.phase.state in FROZEN_OR_LATER:
            reason = f"phase {run.phase.label} is {run.phase.state}"
        if reason:
            _stop_request(run, reason)
            run.refresh_from_db()
            if run.finished:
                return RunChange(run.pk, name, "stopped", reason)
            return RunChange(run.pk, name, "stopping", reason)
    keeper_alive = alive(run.keeper_pid, run.keeper_started)
    if run.stop_requested_at is not None:
        if keeper_alive:
            _signal_keeper(run)  # again: the keeper may have missed it
            return None
        if _close(run, AgentRun.State.STOPPED, f"stopped: {run.stop_reason}"):
            return RunChange(run.pk, name, "stopped", run.stop_reason)
        return None
    if run.state == AgentRun.State.RUNNING:
        if keeper_alive:
            key = (run.pk, run.keeper_pid or 0)
            if key not in _seen_alive:
                _seen_alive.add(key)
                if run.pk not in _spawned:
                    return RunChange(run.pk, name, "adopted", f"keeper pid {run.keeper_pid}")
            return None
        registering = (
            run.keeper_pid is None
            and run.attempt_ended_at is None
            and run.attempt_started_at is not None
            and now - run.attempt_started_at
            < timedelta(seconds=settings.AGENTS_RUNS_REGISTER_GRACE_S)
        )
        if registering:
            return None
        return _crashed(run, now)
    if (run.next_attempt_at is None or run.next_attempt_at <= now) and _attempt_start(run):
        return RunChange(
            run.pk,
            name,
            "restarted" if run.attempts else "started",
            f"attempt {run.attempts + 1}",
        )
    return None


def _crashed(run: AgentRun, now: datetime) -> RunChange | None:
    """The attempt ended without finishing: its keeper recorded a non-zero exit, or died. A
    keeper that could not reach the database left the outcome in the run's status file."""
    why = run.detail if run.attempt_ended_at is not None else "its keeper died"
    if run.attempt_ended_at is None:
        status = status_read(run_folder(settings.AGENTS_RUNS_DIR, run.pk)) or {}
        if status.get("attempt") == run.attempts and status.get("keeper_pid") == run.keeper_pid:
            if status.get("state") in (AgentRun.State.FINISHED, AgentRun.State.STOPPED):
                if _close(run, status["state"], str(status.get("detail") or status["state"])):
                    return RunChange(
                        run.pk, run.agent.name, status["state"], "from its status file"
                    )
                return None
            why = str(status.get("detail") or why)
    _leftovers_end(run)
    if run.attempts > run.max_restarts:
        tries = f"{run.attempts} attempt" + ("s" if run.attempts != 1 else "")
        detail = f"failed after {tries}; the last: {why}"
        if _close(run, AgentRun.State.FAILED, detail, keeper_pid=run.keeper_pid):
            return RunChange(run.pk, run.agent.name, "failed", detail)
        return None
    wait = backoff_seconds(run.attempts)
    moved = AgentRun.objects.filter(
        pk=run.pk, state=AgentRun.State.RUNNING, attempts=run.attempts, keeper_pid=run.keeper_pid
    ).update(
        state=AgentRun.State.STARTING,
        keeper_pid=None,
        keeper_started=None,
        next_attempt_at=now + timedelta(seconds=wait),
        detail=f"attempt {run.attempts} crashed ({why}); next attempt in {wait:g} s",
    )
    if not moved:
        return None
    return RunChange(run.pk, run.agent.name, "crashed", f"attempt {run.attempts}: {why}")


def _attempt_start(run: AgentRun) -> bool:
    """Claim the run's next attempt (one claim wins) and start its keeper."""
    claimed = AgentRun.objects.filter(
        pk=run.pk, state=AgentRun.State.STARTING, attempts=run.attempts, stop_requested_at=None
    ).update(
        state=AgentRun.State.RUNNING,
        attempts=F("attempts") + 1,
        attempt_started_at=timezone.now(),
        attempt_ended_at=None,
        keeper_pid=None,
        keeper_started=None,
        next_attempt_at=None,
    )
    if not claimed:
        return False
    keeper = keeper_spawn(run.pk)
    # The keeper writes the same itself; whichever is first, neither overwrites an ended attempt.
    AgentRun.objects.filter(
        pk=run.pk, state=AgentRun.State.RUNNING, keeper_pid=None, attempt_ended_at=None
    ).update(keeper_pid=keeper.pid, keeper_started=start_time(keeper.pid))
    _seen_alive.add((run.pk, keeper.pid))
    return True


def _stop_request(run: AgentRun, reason: str) -> None:
    AgentRun.objects.filter(pk=run.pk, stop_requested_at=None).update(
        stop_requested_at=timezone.now(), stop_reason=reason[:200]
    )
    run.refresh_from_db()
    if alive(run.keeper_pid, run.keeper_started):
        _signal_keeper(run)
    elif (
        run.keeper_pid is None
        and run.state == AgentRun.State.RUNNING
        and (run.attempt_ended_at is None)
    ):
        pass  # a keeper is registering: it reads the request when it registers, or next poll
    else:
        _close(run, AgentRun.State.STOPPED, f"stopped: {run.stop_reason}")


def _signal_keeper(run: AgentRun) -> None:
    if run.keeper_pid is not None and alive(run.keeper_pid, run.keeper_started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.keeper_pid, signal.SIGUSR1)


def _close(run: AgentRun, state: str, detail: str, *, keeper_pid: int | None = None) -> bool:
    """End a run with no live keeper: its leftovers, its token, its record."""
    _leftovers_end(run)
    now = timezone.now()
    closed = AgentRun.objects.filter(
        pk=run.pk, state__in=AgentRun.UNFINISHED, keeper_pid=keeper_pid or run.keeper_pid
    ).update(state=state, detail=detail[:2000], ended_at=now, keeper_pid=None, keeper_started=None)
    if closed:
        folder = run_folder(settings.AGENTS_RUNS_DIR, run.pk)
        status_write(folder, {"state": state, "detail": detail, "ended_at": now.isoformat()})
    return bool(closed)


def _leftovers_end(run: AgentRun) -> None:
    """Every process of a run whose keeper is gone, its group and its scaffold token."""
    values = RunLimitValues(run.cpus, run.memory_mib, run.max_processes)
    limits_for(run.pk, values, unix_user=run.agent.unix_user).remove()
    scaffold_tokens_revoke(agent=run.agent)


def _reap() -> None:
    for run_id, keeper in list(_spawned.items()):
        if keeper.poll() is not None:
            del _spawned[run_id]


# --- autostart ----------------------------------------------------------------------------
def _autostart(now: datetime) -> list[RunChange]:
    """A run for each agent a running phase's competition fields with a harness, once per
    phase: an agent whose run ended (finished, failed, stopped) is not started again."""
    changes: list[RunChange] = []
    phases = Phase.objects.filter(state=Phase.State.RUNNING, ends_at__gt=now)
    for phase in phases.select_related("competition"):
        entries = CompetitionAgent.objects.filter(
            competition=phase.competition,
            harness__in=[CompetitionAgent.Harness.ARENA, CompetitionAgent.Harness.COMMAND],
        )
        for entry in entries:
            try:
                agent = (
                    Agent.objects.filter(name=entry.name, active=True)
                    .exclude(unix_user="")
                    .exclude(sandbox="")
                    .first()
                )
                if agent is None or AgentRun.objects.filter(agent=agent, phase=phase).exists():
                    continue
                if AgentRun.objects.filter(agent=agent, state__in=AgentRun.UNFINISHED).exists():
                    continue  # a run started by hand goes on
                if agent.scaffold_credit_limit == 0 and entry.scaffold_budget_usd > 0:
                    # The competition's scaffold budget, where nothing set one: a harness
                    # with none could not make a single model call.
                    scaffold_budget_set(agent=agent, limit_usd=entry.scaffold_budget_usd)
                run = run_start(
                    agent=agent,
                    harness=entry.harness,
                    model=entry.model,
                    command=list(entry.command or []),
                    phase=phase,
                )
                changes.append(RunChange(run.pk, agent.name, "started", f"for {phase.label}"))
            except Exception as error:
                log.exception("starting the run of %s failed", entry.name)
                changes.append(
                    RunChange(0, entry.name, "error", f"{type(error).__name__}: {error}")
                )
    return changes
