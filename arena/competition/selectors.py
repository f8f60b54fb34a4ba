from __future__ import annotations

from arena.competition.models import Phase


def phase_current() -> Phase | None:
    """The phase agents are in now: the running one, else the latest that has begun."""
    running = Phase.objects.filter(state=Phase.State.RUNNING).order_by("-starts_at").first()
    if running is not None:
        return running
    return Phase.objects.exclude(state=Phase.State.SCHEDULED).order_by("-starts_at").first()
