"""`python manage.py phases tick|run|status`: drive and inspect the competition's schedule."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from types import FrameType

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections
from django.utils import timezone

from agents.credit import credit_reservations_reconcile
from agents.runs.services import runs_supervise
from arena.competition.models import Phase
from arena.phases.selectors import (
    agent_step_failures_open,
    phase_timeline,
    worker_failures_recent,
)
from arena.phases.services import evaluations_queue_served, phases_tick, worker_failure_record
from arena.phases.serving import ArenaServers
from cluster.services import storage_measure_all
from evalsuite.services import evaluations_collect

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "The phase engine. `tick`: make every due transition once (safe from cron, and under"
        " concurrent runs). `run`: tick every --every seconds, keep the model servers of the"
        " phase in the arena, and run the evaluation suite on them (the platform's worker). `status`: each phase and what comes next."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("tick", help="make every due transition once")
        run = actions.add_parser("run", help="tick periodically and serve the arena's models")
        run.add_argument("--every", type=float, default=30.0, metavar="SECONDS")
        run.add_argument(
            "--storage-every",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="measure the agents' sandboxes against their storage quota this often (0: never)",
        )
        actions.add_parser("status", help="each phase, its state and what happens next")

    def handle(self, *args: object, **options: object) -> None:
        action = options["action"]
        if action == "tick":
            self._tick()
        elif action == "run":
            every, storage_every = options["every"], options["storage_every"]
            assert isinstance(every, float) and isinstance(storage_every, float)
            self._run(every, storage_every=storage_every)
        else:
            self._status()

    def _tick(self, *, brief: bool = False) -> None:
        """One tick, reported in full (or, in the worker's log, a line per move). In full, it
        also names each agent's failed step, and exits non-zero (for cron) if a phase's move
        failed."""
        started = timezone.now()
        made = phases_tick()
        for transition in made:
            label, to_state = transition.phase.label, transition.to_state
            self.stdout.write(
                f"{label}: -> {to_state}"
                if brief
                else f"{label}: {transition.from_state} -> {to_state}  {transition.detail}"
            )
        # Right after the transitions: a phase that just froze stops its agents' runs, one
        # that just started starts them.
        self._guarded("runs", self._supervise_runs)
        if brief:
            return
        if not made:
            self.stdout.write("nothing due")
        for step in agent_step_failures_open():
            self.stdout.write(
                f"{step.phase.label}: {step.step} failed for {step.agent.name} "
                f"({step.attempts} tries, retried each tick): {step.error}"
            )
        failed = worker_failures_recent(since=started)
        for failure in failed:
            label = failure.phase.label if failure.phase else failure.task
            self.stderr.write(f"{label}: {failure.task} failed: {failure.error}")
        if failed:
            raise CommandError("some moves failed; the next tick tries them again")

    def _run(self, every: float, *, storage_every: float) -> None:
        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        servers = ArenaServers()
        self.stdout.write(f"phase engine: ticking every {every:g} s (Ctrl-C stops)")
        storage_due = time.monotonic()
        self.storage_blocked: dict[str, str] = {}
        try:
            while not stopping:
                # Each part of a round on its own: one that raises (a phase's move, a model
                # server that cannot start, the scheduler gone) is logged and recorded, and
                # the rest of the round, the arena's servers included, goes on; the next
                # round tries it again.
                close_old_connections()  # a connection broken by a database restart
                self._guarded("tick", lambda: self._tick(brief=True))
                if storage_every > 0 and time.monotonic() >= storage_due:
                    # Walking sandboxes takes a while on big ones: not on every tick.
                    storage_due = time.monotonic() + storage_every
                    self._guarded("storage", self._measure_storage)
                self._guarded("serving", lambda: self._serve(servers))
                self._guarded("credit", self._reconcile_credit)
                self._guarded("evaluations", self._evaluate)
                deadline = time.monotonic() + every
                while not stopping and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            # Only a stopped worker stops the servers it started (they are its children).
            servers.stop()
            self.stdout.write("phase engine stopped; model servers stopped")

    def _guarded(self, task: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as error:  # the worker outlives any one failure
            log.exception("phase engine: %s failed; the next round tries again", task)
            self.stderr.write(f"{task} failed: {type(error).__name__}: {error}")
            worker_failure_record(task=task, error=error)

    def _supervise_runs(self) -> None:
        for change in runs_supervise():
            self.stdout.write(f"runs: {change}")

    def _serve(self, servers: ArenaServers) -> None:
        for name in servers.sync():
            self.stdout.write(f"serving {name}")

    def _evaluate(self) -> None:
        """The evaluation suite for what was just served, and results of finished jobs."""
        for run in evaluations_queue_served():
            self.stdout.write(f"evaluating {run.model_label} (run {run.pk})")
        for run in evaluations_collect():
            self.stdout.write(f"evaluated {run.model_label}: {run.state}")

    def _reconcile_credit(self) -> None:
        """API calls whose proxy process died before settling: charged their reservation."""
        for call in credit_reservations_reconcile():
            self.stdout.write(
                f"credit {call.agent.name}: call {call.pk} settled at its reservation"
            )

    def _measure_storage(self) -> None:
        """Storage quotas: a line when an account gets blocked or unblocked."""
        lines = storage_measure_all()
        blocked = {line.account: line.blocked_reason for line in lines if line.blocked_reason}
        for account, reason in blocked.items():
            if account not in self.storage_blocked:
                self.stdout.write(f"storage {account}: {reason}")
        for account in self.storage_blocked.keys() - blocked.keys():
            self.stdout.write(f"storage {account}: back under the storage quota")
        self.storage_blocked = blocked

    def _status(self) -> None:
        now = timezone.now()
        phases = Phase.objects.select_related("competition").order_by("competition", "number")
        if not phases:
            self.stdout.write("no competition is planned")
        for phase in phases:
            what, when = phase_timeline(phase, now)
            at = f" at {when:%Y-%m-%d %H:%M} UTC" if when else ""
            self.stdout.write(
                f"{phase.competition.name} {phase.label:<10} {phase.state:<10} next: {what}{at}"
            )
