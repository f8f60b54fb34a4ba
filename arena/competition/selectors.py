from __future__ import annotations

from arena.competition.models import Phase


def phase_current() -> Phase | None:
    """The phase agents are in now: the running one, else the latest that has begun."""
    running = Phase.objects.filter(state=Phase.State.RUNNING).order_by("-starts_at").first()
    if running is not None:
        return running
    return Phase.objects.exclude(state=Phase.State.SCHEDULED).order_by("-starts_at").first()


def phase_in_arena() -> Phase | None:
    """The phase whose nominated models the arena serves now (its battles carry its label)."""
    return Phase.objects.filter(state=Phase.State.SERVING).order_by("-starts_at").first()
