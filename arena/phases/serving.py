"""Model servers for the arena's contestants, kept by a long-running process (the platform's
worker, `phases run`, or the demo): a one-shot `phases tick` cannot own a server's life."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from arena.competition.selectors import phase_in_arena
from arena.phases.models import PhaseContestant
from arena.serving.backends import ServingBackend, serving_backend_from_settings
from arena.serving.models import Contestant

log = logging.getLogger(__name__)


class ArenaServers:
    """Serves exactly the contestants of the phase in the arena that have no endpoint yet."""

    def __init__(self, backend_factory: Callable[[], ServingBackend] | None = None) -> None:
        self.backend_factory = backend_factory or serving_backend_from_settings
        self.running: dict[int, ServingBackend] = {}

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
            checkpoint = Path(entry.checkpoint_path)
            # A checkpoint on this machine is ours to serve (a URL left by an earlier worker
            # is stale); anything else is served elsewhere and keeps its endpoint.
            if contestant_id in self.running or not checkpoint.is_dir():
                continue
            backend = self.backend_factory()
            (endpoint,) = backend.start([checkpoint])
            self.running[contestant_id] = backend
            Contestant.objects.filter(pk=contestant_id).update(
                base_url=endpoint.base_url,
                served_model_name=endpoint.model,
                api_key=endpoint.api_key,
                active=True,
            )
            started.append(entry.contestant.display_name)
        return started

    def stop(self) -> None:
        for contestant_id, backend in list(self.running.items()):
            backend.stop()
            Contestant.objects.filter(pk=contestant_id).update(active=False, base_url="")
        self.running.clear()
