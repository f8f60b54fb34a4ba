"""Model servers for the arena's contestants, kept by a long-running process (the platform's
worker, `phases run`, or the demo): a one-shot `phases tick` cannot own a server's life.

A nominee is served from the platform's copy of its checkpoint only (agents/nominees.py),
whose files are hashed again before its server starts. A contestant that cannot be served —
its copy changed or unreadable, or its server would not start — is marked (a nominee's copy
records the reason, shown on the organizers' dashboard; a reference's failure is a
WorkerFailure) and skipped, and the others are still started: one broken model never keeps
the rest of the arena down.

Every round the worker also lets each backend keep its servers (`ServingBackend.maintain`): a
Slurm server that is lost (node failure, a job that ended, failed health checks) or nears its
job's time limit gets a replacement; once that is healthy the contestant's row points at it,
which every new battle reads, and the old server is stopped only after the battles that began
on it have finished (or the backend's drain timeout). Each change is a `ServingEvent` for the
organizers; a lost server and a replacement that failed are worker failures too."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from agents.models import NomineeCopy
from agents.nominees import NomineeRefused, nominee_copy_checked, nominee_copy_refuse
from arena.battles.models import Battle
from arena.competition.selectors import phase_in_arena
from arena.phases.models import PhaseContestant
from arena.phases.services import worker_failure_record
from arena.serving.backend_choice import serving_backend_from_settings
from arena.serving.backends import LOST, REPLACEMENT_FAILED, ServerChange, ServingBackend
from arena.serving.client import Endpoint
from arena.serving.models import Contestant
from arena.serving.services import serving_event_record

log = logging.getLogger(__name__)


class ContestantNotServed(Exception):
    """Recorded as a worker failure: a reference model the arena could not serve."""


class ServerReplaced(Exception):
    """Recorded as a worker failure: a contestant's server was lost, or its replacement
    failed; the backend keeps trying."""


# A battle claims its generation (stamping `generation_started_at`, by its process's clock)
# and then reads its contestants' endpoints: one stamped up to this long after a move may
# still have read the old endpoint, if the clocks of the worker and of an ASGI host differ.
CLOCK_SLACK = timedelta(seconds=5)


@dataclass(frozen=True)
class ContestantEndpoint:
    """A contestant's row, where every new battle reads its endpoint (not cached: a battle
    loads its answers' contestants when it starts generating)."""

    contestant_id: int

    def move(self, old: Endpoint, new: Endpoint) -> None:
        Contestant.objects.filter(pk=self.contestant_id).update(
            base_url=new.base_url, served_model_name=new.model, api_key=new.api_key, active=True
        )

    def withdraw(self, old: Endpoint) -> None:
        Contestant.objects.filter(pk=self.contestant_id, served_model_name=old.model).update(
            active=False
        )

    def in_flight(self, old: Endpoint, *, since: datetime) -> bool:
        return Battle.objects.filter(
            state=Battle.State.GENERATING,
            answers__contestant_id=self.contestant_id,
            generation_started_at__lte=since + CLOCK_SLACK,
        ).exists()


class ArenaServers:
    """Serves exactly the contestants of the phase in the arena that have no endpoint yet."""

    def __init__(self, backend_factory: Callable[[], ServingBackend] | None = None) -> None:
        self.backend_factory = backend_factory or serving_backend_from_settings
        self.running: dict[int, ServingBackend] = {}
        # Contestants that could not be served, and why: not tried again by this worker.
        self.refused: dict[int, str] = {}

    def sync(self) -> list[str]:
        """Start what the arena's phase needs, stop what it no longer does; the names started."""
        phase = phase_in_arena()
        wanted = (
            {
                entry.contestant_id: entry
                for entry in PhaseContestant.objects.filter(phase=phase).select_related(
                    "contestant"
                )
            }
            if phase is not None
            else {}
        )
        for contestant_id in [c for c in self.running if c not in wanted]:
            self.running.pop(contestant_id).stop()
            Contestant.objects.filter(pk=contestant_id).update(active=False, base_url="")
        started = []
        for contestant_id, entry in wanted.items():
            if contestant_id in self.running or contestant_id in self.refused:
                continue
            checkpoint = self._checkpoint(entry)
            if checkpoint is None:
                continue
            backend = self.backend_factory()
            try:
                (endpoint,) = backend.start([checkpoint])
            except Exception as error:  # ServerStartError, a model that does not load, …
                with contextlib.suppress(Exception):
                    backend.stop()
                self._refuse(entry, f"its model server did not start: {error}")
                continue
            self.running[contestant_id] = backend
            Contestant.objects.filter(pk=contestant_id).update(
                base_url=endpoint.base_url,
                served_model_name=endpoint.model,
                api_key=endpoint.api_key,
                active=True,
            )
            started.append(entry.contestant.display_name)
        for contestant_id, backend in self.running.items():
            self._maintain(wanted[contestant_id], backend)
        return started

    def _maintain(self, entry: PhaseContestant, backend: ServingBackend) -> None:
        name = entry.contestant.display_name
        try:
            changes = backend.maintain(ContestantEndpoint(entry.contestant_id))
        except Exception as error:  # the scheduler gone, ...: the next round tries again
            log.exception("keeping the server of %s failed", name)
            worker_failure_record(task=f"serving {name}", error=error, phase_id=entry.phase_id)
            return
        for change in changes:
            self._record(entry, change)

    def _record(self, entry: PhaseContestant, change: ServerChange) -> None:
        name = entry.contestant.display_name
        line = f"{change.kind}: {change.reason}" + (f" ({change.detail})" if change.detail else "")
        trouble = change.kind in {LOST, REPLACEMENT_FAILED}
        log.log(logging.WARNING if trouble else logging.INFO, "server of %s %s", name, line)
        serving_event_record(contestant_id=entry.contestant_id, change=change)
        if trouble:
            worker_failure_record(
                task=f"serving {name}", error=ServerReplaced(line), phase_id=entry.phase_id
            )

    def _checkpoint(self, entry: PhaseContestant) -> Path | None:
        """What to serve for `entry`: a nominee's verified copy; a reference's folder on this
        machine. None: nothing to start here (served elsewhere, or refused and marked)."""
        if entry.nomination_id is None:
            # A checkpoint on this machine is ours to serve (a URL left by an earlier worker
            # is stale); anything else is served elsewhere and keeps its endpoint.
            folder = Path(entry.checkpoint_path) if entry.checkpoint_path else None
            return folder if folder is not None and folder.is_dir() else None
        copy = NomineeCopy.objects.filter(nomination_id=entry.nomination_id).first()
        if copy is None:
            self._refuse(entry, "the platform holds no copy of the nominated checkpoint")
            return None
        try:
            return nominee_copy_checked(copy)
        except NomineeRefused as refused:
            self._refuse(entry, str(refused))
            return None

    def _refuse(self, entry: PhaseContestant, reason: str) -> None:
        name = entry.contestant.display_name
        log.warning("not serving %s: %s", name, reason)
        self.refused[entry.contestant_id] = reason
        Contestant.objects.filter(pk=entry.contestant_id).update(active=False, base_url="")
        copy = (
            NomineeCopy.objects.filter(nomination_id=entry.nomination_id).first()
            if entry.nomination_id is not None
            else None
        )
        if copy is not None:
            if copy.not_servable_reason != reason:
                nominee_copy_refuse(copy=copy, reason=reason)
        else:
            worker_failure_record(
                task=f"serving {name}", error=ContestantNotServed(reason), phase_id=entry.phase_id
            )

    def stop(self) -> None:
        for contestant_id, backend in list(self.running.items()):
            backend.stop()
            Contestant.objects.filter(pk=contestant_id).update(active=False, base_url="")
        self.running.clear()
