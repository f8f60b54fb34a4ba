"""What feeds the strategy lock-in measure (`agents/strategy.py`) from the database: an agent's
jobs booked to a phase (`Job.period` is the phase's label) and the data sources it registered
while the phase ran."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models.functions import Substr

from agents.models import Agent
from agents.strategy import (
    SCRIPT_BYTES_READ,
    Attempt,
    LockIn,
    data_approach,
    job_approach,
    lock_in,
)
from arena.competition.models import Phase
from cluster.models import Job

# A phase's attempts read at most this many jobs and data records (the newest are dropped
# past it): an agent that floods the cluster with tiny jobs cannot make the dashboard slow.
MAX_JOBS_READ = 5_000
MAX_DATA_RECORDS_READ = 5_000


@dataclass(frozen=True)
class PhaseLockIn:
    agent: str
    phase: str
    starts_at: dt.datetime
    ends_at: dt.datetime
    measure: LockIn


def strategy_attempts(
    agent: Agent, phase: Phase, *, until: dt.datetime | None = None
) -> list[Attempt]:
    """The agent's attempts in `phase` (jobs of its budget period, data registered between the
    phase's start and end), up to `until` if given (a daily report as of the end of its day)."""
    end = phase.ends_at if until is None else min(phase.ends_at, until)
    jobs = Job.objects.filter(
        account_id=agent.cluster_account_id, period=phase.label, submitted_at__lt=end
    ).order_by("submitted_at", "pk")
    attempts = []
    # Only the part of each script the measure reads leaves the database.
    heads = jobs.annotate(head=Substr("script", 1, SCRIPT_BYTES_READ))
    for scheduler_id, name, script, submitted_at in heads.values_list(
        "scheduler_id", "name", "head", "submitted_at"
    )[:MAX_JOBS_READ]:
        approach = job_approach(name, script)
        if approach is not None:
            attempts.append(Attempt(at=submitted_at, approach=approach, what=f"job {scheduler_id}"))
    records = agent.data_records.filter(
        created_at__gte=phase.starts_at, created_at__lt=end
    ).order_by("created_at", "pk")
    for pk, sources, created_at in records.values_list("pk", "sources", "created_at")[
        :MAX_DATA_RECORDS_READ
    ]:
        for source in sources if isinstance(sources, list) else []:
            if isinstance(source, str) and source.strip():
                attempts.append(
                    Attempt(at=created_at, approach=data_approach(source), what=f"data {pk}")
                )
    return attempts


def phase_lock_in(agent: Agent, phase: Phase, *, until: dt.datetime | None = None) -> PhaseLockIn:
    return PhaseLockIn(
        agent=agent.name,
        phase=phase.label,
        starts_at=phase.starts_at,
        ends_at=phase.ends_at,
        measure=lock_in(
            strategy_attempts(agent, phase, until=until),
            starts_at=phase.starts_at,
            ends_at=phase.ends_at,
        ),
    )


def lock_ins_begun(*, now: dt.datetime) -> list[PhaseLockIn]:
    """Every agent's lock-in in every phase that has begun, newest phase first."""
    phases = Phase.objects.filter(starts_at__lte=now).exclude(state=Phase.State.SCHEDULED)
    agents = list(Agent.objects.filter(cluster_account__isnull=False).order_by("name"))
    return [
        phase_lock_in(agent, phase, until=now)
        for phase in phases.order_by("-starts_at", "-number")
        for agent in agents
    ]
