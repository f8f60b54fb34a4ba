"""Model servers for the arena's contestants, kept by a long-running process (the platform's
worker, `phases run`, or the demo): a one-shot `phases tick` cannot own a server's life.

A nominee is served from the platform's copy of its checkpoint only (agents/nominees.py),
whose files are hashed again before its server starts. A contestant that cannot be served —
its copy changed or unreadable, or its server would not start — is marked (a nominee's copy
records the reason, shown on the organizers' dashboard; a reference's failure is a
WorkerFailure) and skipped, and the others are still started: one broken model never keeps
the rest of the arena down."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from agents.models import NomineeCopy
from agents.nominees import NomineeRefused, nominee_copy_checked, nominee_copy_refuse
from arena.competition.selectors import phase_in_arena
from arena.phases.models import PhaseContestant
from arena.phases.services import worker_failure_record
from arena.serving.backends import ServingBackend, serving_backend_from_settings
from arena.serving.models import Contestant

log = logging.getLogger(__name__)


class ContestantNotServed(Exception):
    """Recorded as a worker failure: a reference model the arena could not serve."""


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
        return started

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
