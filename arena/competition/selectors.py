from __future__ import annotations

from arena.competition.models import Phase
from cluster.backends.base import AccountLimits


def phase_current() -> Phase | None:
    """The phase agents are in now: the running one, else the latest that has begun."""
    running = phase_running()
    if running is not None:
        return running
    return Phase.objects.exclude(state=Phase.State.SCHEDULED).order_by("-starts_at").first()


def phase_in_arena() -> Phase | None:
    """The phase whose nominated models the arena serves now (its battles carry its label)."""
    return Phase.objects.filter(state=Phase.State.SERVING).order_by("-starts_at").first()


def phase_running() -> Phase | None:
    return Phase.objects.filter(state=Phase.State.RUNNING).order_by("-starts_at").first()


def phase_account_limits(phase: Phase) -> AccountLimits:
    """An agent's Slurm limits while `phase` runs."""
    return AccountLimits(
        gpu_hours=float(phase.gpu_hours),
        max_gpus=phase.max_gpus,
        max_preemptible_gpus=phase.max_preemptible_gpus,
        max_job_hours=phase.max_job_hours,
    )
