"""Rows for organizer tests: an agent with its cluster account, jobs, spend, data, nominations.

The ledgers are written the way the services write them (a segment and its charge together),
but directly, so a test can place them on a chosen day."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from itertools import count

from agents.models import Agent, Checkpoint, DataRecord, Nomination, ProxyCall
from arena.competition.models import Phase
from cluster.models import ClusterAccount, GpuLedger, Job, JobSegment
from tests import factories

_numbers = count(1)

CARD = factories.MODEL_CARD


def agent(name: str, *, gpu_hours: float = 100, credit: float = 300, period: str = "phase-1"):
    account = ClusterAccount.objects.create(
        name=f"acct_{name}", unix_user=f"agent_{name}", period=period,
        gpu_hours_limit=Decimal(str(gpu_hours)), max_gpus=8, max_preemptible_gpus=8,
        max_job_hours=24, storage_gib_limit=400, storage_bytes_used=100 * 1024**3,
    )  # fmt: skip
    GpuLedger.objects.create(account=account, period=period)
    return Agent.objects.create(
        name=name, cluster_account=account, credit_limit=Decimal(str(credit))
    )


def job(
    agent: Agent,
    *,
    submitted: dt.datetime,
    runs: list[tuple[dt.datetime, dt.datetime]] = (),
    gpus: int = 1,
    state: str = Job.State.COMPLETED,
    name: str = "sft",
    script: str = "",
) -> Job:
    account = ClusterAccount.objects.get(name=agent.cluster_account)
    row = Job.objects.create(
        account=account, period=account.period, backend="local",
        # Ids far above what a test's own local cluster hands out, so its jobs never collide.
        scheduler_id=str(1_000_000 + next(_numbers)), name=name, qos="normal", nodes=1, gpus=gpus,
        time_limit_minutes=600, workdir="/tmp", script=script, stdout_path="", state=state,
        started_at=runs[0][0] if runs else None,
        ended_at=runs[-1][1] if runs and state in Job.FINISHED else None,
    )  # fmt: skip
    Job.objects.filter(pk=row.pk).update(submitted_at=submitted)
    for started, ended in runs:
        seconds = int((ended - started).total_seconds())
        JobSegment.objects.create(
            job=row, started_at=started, ended_at=ended, state=state, gpus=gpus,
            elapsed_seconds=seconds,
        )  # fmt: skip
        GpuLedger.objects.filter(account=account, period=account.period).update(
            gpu_seconds=models_f("gpu_seconds") + gpus * seconds
        )
        Job.objects.filter(pk=row.pk).update(
            gpu_seconds_charged=models_f("gpu_seconds_charged") + gpus * seconds
        )
    row.refresh_from_db()
    return row


def models_f(name: str):
    from django.db.models import F

    return F(name)


def proxy_call(agent: Agent, *, at: dt.datetime, cost: str, tokens: int = 1000) -> ProxyCall:
    call = ProxyCall.objects.create(
        agent=agent, model="gpt-test", stream=False, status=200, prompt_tokens=tokens // 2,
        completion_tokens=tokens - tokens // 2, reserved_usd=Decimal(cost), cost_usd=Decimal(cost),
    )  # fmt: skip
    ProxyCall.objects.filter(pk=call.pk).update(created_at=at)
    Agent.objects.filter(pk=agent.pk).update(credit_spent=models_f("credit_spent") + Decimal(cost))
    return call


def data_record(
    agent: Agent, *, at: dt.datetime, path: str = "data/sft.jsonl",
    sources: list[str] = ("generated:tiny-chats",),
) -> DataRecord:  # fmt: skip
    record = DataRecord.objects.create(
        agent=agent, path=path, sha256="a" * 64, rows=400, tokens=12000,
        sources=list(sources), licence="CC0", reason="teach the stop token",
    )  # fmt: skip
    DataRecord.objects.filter(pk=record.pk).update(created_at=at)
    return record


def checkpoint(agent: Agent, *, job: Job, at: dt.datetime, path: str = "ckpt-1") -> Checkpoint:
    made = Checkpoint.objects.create(
        agent=agent, path=path, job=job, architecture="LlamaForCausalLM", parameters=850_000,
        end_of_turn_token="<|im_end|>", weights_sha256="0" * 64,
    )  # fmt: skip
    Checkpoint.objects.filter(pk=made.pk).update(created_at=at)
    return made


def nomination(
    agent: Agent, *, phase: Phase, checkpoint: Checkpoint, card: str = CARD, at=None
) -> Nomination:
    from agents.services import parse_model_card

    made = Nomination.objects.create(
        agent=agent, phase=phase, checkpoint=checkpoint, model_card=card,
        card_fields=parse_model_card(card),
    )  # fmt: skip
    if at is not None:
        Nomination.objects.filter(pk=made.pk).update(created_at=at, updated_at=at)
    return made
