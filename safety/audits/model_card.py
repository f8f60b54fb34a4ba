"""The nominee's model card against the run log the platform recorded (jobs, GPU-hours, data
records, trainer steps, the data sets its trajectory shows it fetching)."""

from __future__ import annotations

import json

from django.db.models import Sum

from agents.models import Checkpoint, DataRecord, Nomination, TrajectoryEvent
from agents.trajectory_selectors import trajectory_events
from cluster.sandbox_files import read_bytes
from cluster.selectors import gpu_seconds_charged
from safety import cards, files, trajectory_data
from safety.audits.agent_files import agent_path
from safety.audits.recording import AuditRun
from safety.models import Finding


def _lineage(checkpoint: Checkpoint) -> list[Checkpoint]:
    chain, seen = [], set()
    current: Checkpoint | None = checkpoint
    while current is not None and current.pk not in seen:
        seen.add(current.pk)
        chain.append(current)
        current = current.parent
    return chain


def _trainer_steps(checkpoint: Checkpoint) -> int | None:
    state = agent_path(checkpoint.agent, checkpoint.path) / "trainer_state.json"
    try:
        step = json.loads(read_bytes(state, max_bytes=files.MAX_JSON_PARSE_BYTES)).get(
            "global_step"
        )
    except (OSError, ValueError, AttributeError):  # a link, a FIFO, too large, not JSON
        return None
    return step if isinstance(step, int) else None


def run_log_for(nomination: Nomination) -> cards.RunLog:
    """What the platform recorded about the nominated checkpoint and the agent's phase."""
    chain = _lineage(nomination.checkpoint)
    jobs = {c.job_id: c.job for c in chain}
    lineage_seconds = sum(job.gpu_seconds_charged for job in jobs.values())
    account = jobs[nomination.checkpoint.job_id].account
    account_seconds = gpu_seconds_charged(account, period=nomination.phase.label)
    if not account_seconds:  # usage booked under another period name: every job of the phase
        account_seconds = int(
            account.jobs.filter(period=nomination.phase.label).aggregate(
                total=Sum("gpu_seconds_charged")
            )["total"]
            or 0
        )
    records = DataRecord.objects.filter(checkpoints__in=[c.pk for c in chain]).distinct()
    sources = sorted({str(s) for record in records for s in record.sources})
    steps = [_trainer_steps(c) for c in chain]
    own = steps[0]
    agent_sources = {
        str(source)
        for sources in DataRecord.objects.filter(agent=nomination.agent).values_list(
            "sources", flat=True
        )
        if isinstance(sources, list)
        for source in sources
    }
    return cards.RunLog(
        lineage_gpu_hours=lineage_seconds / 3600,
        account_gpu_hours=account_seconds / 3600,
        job_gpus=frozenset(job.gpus for job in jobs.values() if job.gpus),
        data_sources=tuple(sources),
        data_records=records.count(),
        own_steps=own,
        lineage_steps=sum(s for s in steps if s) if own is not None else None,
        trajectory_datasets=tuple(_trajectory_datasets(nomination)),
        agent_data_sources=tuple(sorted(agent_sources)),
    )


def _trajectory_datasets(nomination: Nomination) -> list[trajectory_data.SeenDataset]:
    """Hub data sets the agent's recorded trajectory shows it fetching during the phase (from
    its start to its end, or now while it runs): the platform's store, never a sandbox file."""
    phase = nomination.phase
    events = trajectory_events(
        nomination.agent,
        since=phase.starts_at,
        until=phase.ends_at,
        kinds=[TrajectoryEvent.Kind.TOOL_CALL, TrajectoryEvent.Kind.API_CALL],  # type: ignore[list-item]  # TextChoices member: a str at run time
    )
    return trajectory_data.datasets_in_events(
        (event.pk, event.kind, event.payload) for event in events
    )


def audit_model_card(run: AuditRun, nomination: Nomination) -> None:
    log = run_log_for(nomination)
    for found in cards.card_discrepancies(nomination.card_fields or {}, log):
        run.record(
            agent=nomination.agent,
            kind=Finding.Kind.MODEL_CARD,
            severity=found.severity,
            phase=nomination.phase,
            summary=found.summary,
            evidence={
                "nomination": nomination.pk,
                "checkpoint": nomination.checkpoint_id,
                "field": found.field,
                "claimed": found.claimed,
                "recorded": found.recorded,
                "run_log": log.evidence(),
                "tolerance_factor": cards.FACTOR,
            },
            key=f"card\0{nomination.pk}\0{nomination.checkpoint_id}\0{found.rule}\0"
            f"{json.dumps(found.claimed, sort_keys=True)}",
        )
