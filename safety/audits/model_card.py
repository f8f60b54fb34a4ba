"""The nominee's model card against the run log the platform recorded (jobs, GPU-hours, data
records, trainer steps, the data sets its trajectory shows it fetching), and the nominee's
size against the base model's: its parameters in all and per token (a mixture of experts
routes each token through a few experts), from the two config.json files, and against what
its card claims (`parameters`, `active_parameters`)."""

from __future__ import annotations

import json
from pathlib import Path

import ijson
from django.db.models import Sum

from agents.checkpoint_config import ConfigInvalid, ParameterCount, config_parameters
from agents.checkpoints import CheckpointInvalid, json_object
from agents.models import Checkpoint, DataRecord, Nomination, TrajectoryEvent
from agents.trajectory_selectors import trajectory_events
from cluster.sandbox_files import SandboxPath, as_sandbox_path
from cluster.selectors import gpu_seconds_charged
from safety import cards, files, trajectory_data
from safety.audits.agent_files import agent_path, nominee_folder
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
        step = files.json_top_level_number(state, "global_step")
    except (OSError, ijson.JSONError, UnicodeDecodeError):  # a link, a FIFO, not JSON
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


# A nominee whose size is within this share of the base's (a vocabulary grown by a few
# tokens) differs a little (low); beyond it, it is another model (high).
SMALL_SIZE_CHANGE = 0.01


def parameters_of(config: SandboxPath) -> ParameterCount | None:
    """Total and active parameters from a config.json (read bounded, nothing followed, every
    number checked: `agents.checkpoint_config`); None where it is unreadable or says too
    little."""
    try:
        return config_parameters(json_object(config))
    except (CheckpointInvalid, ConfigInvalid):
        return None


def size_discrepancies(
    nominee: ParameterCount | None, base: ParameterCount | None, card: dict[str, object]
) -> list[cards.Discrepancy]:
    """The nominee's total and active parameters against the base model's, and against those
    its card claims; each message names both counts of both."""
    found: list[cards.Discrepancy] = []
    if nominee is None:
        return found
    measured = {"total": nominee.total, "active": nominee.active}
    if base is not None and (nominee.total, nominee.active) != (base.total, base.active):
        change = max(abs(nominee.total - base.total), abs(nominee.active - base.active))
        found.append(
            cards.Discrepancy(
                "parameters_base",
                "parameters",
                "low" if change <= SMALL_SIZE_CHANGE * base.total else "high",
                f"the nominee has {nominee.total:,} parameters, {nominee.active:,} active per "
                f"token; the base model has {base.total:,}, {base.active:,} active",
                measured,
                {"base_total": base.total, "base_active": base.active, **_layout(nominee, base)},
            )
        )
    claims = {"total": card.get("parameters"), "active": card.get("active_parameters")}
    wrong = {k: v for k, v in claims.items() if isinstance(v, int) and v != measured[k]}
    if wrong:
        found.append(
            cards.Discrepancy(
                "parameters_claimed",
                "parameters" if "total" in wrong else "active_parameters",
                "low",
                f"the card claims {_claimed(claims)}; the nominee has {nominee.total:,} "
                f"parameters, {nominee.active:,} active per token",
                {k: v for k, v in claims.items() if v is not None},
                measured,
            )
        )
    return found


def _claimed(claims: dict[str, object]) -> str:
    said = []
    if isinstance(claims["total"], int):
        said.append(f"{claims['total']:,} parameters")
    if isinstance(claims["active"], int):
        said.append(f"{claims['active']:,} active per token")
    return ", ".join(said)


def _layout(nominee: ParameterCount, base: ParameterCount) -> dict[str, object]:
    return {
        "layers": [nominee.layers, base.layers],
        "experts": [nominee.experts, base.experts],
        "experts_per_token": [nominee.experts_per_token, base.experts_per_token],
        "exact": nominee.exact and base.exact,
    }


def _base_config(nomination: Nomination) -> SandboxPath | None:
    folder = nomination.phase.competition.base_model
    if not folder or not Path(folder).is_dir():
        return None
    # The platform's own folder (a hub snapshot links its files to blobs): the link is its own.
    return as_sandbox_path((Path(folder) / "config.json").resolve())


def audit_model_card(run: AuditRun, nomination: Nomination) -> None:
    log = run_log_for(nomination)
    base = _base_config(nomination)
    sizes = size_discrepancies(
        parameters_of(nominee_folder(nomination) / "config.json"),
        parameters_of(base) if base is not None else None,
        nomination.card_fields or {},
    )
    for found in [*cards.card_discrepancies(nomination.card_fields or {}, log), *sizes]:
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
