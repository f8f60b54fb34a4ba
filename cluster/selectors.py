from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db.models import Count, F, Q, Sum

from cluster.backends import cluster_backend
from cluster.backends.base import ClusterBackend
from cluster.models import ClusterAccount, GpuLedger, Job, JobSegment
from cluster.sandbox_files import SandboxPath, UnsafePath, locate, read_tail


@dataclass(frozen=True)
class AccountUsage:
    account: str
    platform_gpu_hours: float
    scheduler_gpu_hours: float | None
    limit_gpu_hours: float
    running_gpus: int
    running_preemptible_gpus: int


def gpu_seconds_charged(account: ClusterAccount, *, period: str | None = None) -> int:
    ledgers = GpuLedger.objects.filter(account=account)
    if period is not None:
        ledgers = ledgers.filter(period=period)
    return int(ledgers.aggregate(total=Sum("gpu_seconds"))["total"] or 0)


def account_usage(*, backend: ClusterBackend | None = None) -> list[AccountUsage]:
    backend = backend or cluster_backend()
    usages = []
    for account in ClusterAccount.objects.all():
        try:
            scheduler: float | None = backend.charged_gpu_minutes(account=account.name) / 60
        except LookupError:
            scheduler = None
        running = Job.objects.filter(account=account, state=Job.State.RUNNING)
        usages.append(
            AccountUsage(
                account=account.name,
                platform_gpu_hours=gpu_seconds_charged(account, period=account.period) / 3600,
                scheduler_gpu_hours=scheduler,
                limit_gpu_hours=float(account.gpu_hours_limit),
                running_gpus=sum(j.gpus for j in running.filter(qos="normal")),
                running_preemptible_gpus=sum(j.gpus for j in running.filter(qos="preemptible")),
            )
        )
    return usages


def job_result(job: Job, *, backend: ClusterBackend | None = None) -> Any:
    """The return value of a finished Python-callable job (raises what the callable raised)."""
    return (backend or cluster_backend()).callable_result(
        scheduler_id=job.scheduler_id, workdir=Path(job.workdir)
    )


def job_output(job: Job, *, tail_bytes: int = 64 * 1024) -> str:
    """The end of the job's output (stdout and stderr together), "" if there is none yet.

    The file sits in a folder the job's owner controls: it is read without following a link
    anywhere below the account's sandbox (or, for a job without one, below its workdir), only
    if it is a regular file, and never more than `tail_bytes`. Anything else is answered with
    the reason in words, so a planted link to another sandbox, `/dev/zero` or a FIFO shows
    nothing and holds nobody up."""
    if not job.stdout_path:
        return ""
    try:
        output = read_tail(job_output_file(job), max_bytes=tail_bytes)
        return output.decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    except OSError as refused:  # UnsafePath, or a folder on the way that is not one
        return f"[the output is not shown: {refused}]"


def job_output_file(job: Job) -> SandboxPath:
    """The output file below where the job's owner's control begins: the account's sandbox,
    or for a job without one (the platform's own), its working directory."""
    if job.account.storage_path:
        with contextlib.suppress(UnsafePath):  # not in the sandbox: a platform job's
            return locate(Path(job.account.storage_path), job.stdout_path)
    return locate(Path(job.workdir), job.stdout_path)


# -- reads for the organizer's pages ---------------------------------------------------------


def accounts_by_name(names: Collection[str] | None = None) -> dict[str, ClusterAccount]:
    accounts = ClusterAccount.objects.all()
    if names is not None:
        accounts = accounts.filter(name__in=list(names))
    return {account.name: account for account in accounts}


def job_counts_by_state(*, account: str | None = None) -> dict[str, int]:
    """Job rows per state (as of the last sync), of one account or of all."""
    jobs = Job.objects.all() if account is None else Job.objects.filter(account__name=account)
    return dict(jobs.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


def running_gpus_by_account_qos() -> dict[tuple[str, str], int]:
    """GPUs of the RUNNING job rows per (account, QOS): the platform's view as of the last
    sync, for when the scheduler itself does not answer."""
    running = (
        Job.objects.filter(state=Job.State.RUNNING)
        .values_list("account__name", "qos")
        .annotate(gpus=Sum("gpus"))
    )
    return {(account, qos): gpus for account, qos, gpus in running}


def jobs_latest(*, accounts: Collection[str] | None = None, limit: int = 50) -> list[Job]:
    """The newest jobs first, of the given accounts or of all, with their account."""
    jobs = Job.objects.select_related("account").order_by("-submitted_at")
    if accounts is not None:
        jobs = jobs.filter(account__name__in=list(accounts))
    return list(jobs[:limit])


# -- for the organizers' daily reports (arena.phases.reports) ---------------------------------


def gpu_seconds_used_by(account: ClusterAccount, *, end: dt.datetime) -> int:
    """GPU-seconds of the account's runs in its current budget period that ended before `end`."""
    total = JobSegment.objects.filter(
        job__account=account, job__period=account.period, ended_at__lt=end
    ).aggregate(total=Sum(F("gpus") * F("elapsed_seconds")))["total"]
    return int(total or 0)


def job_segments_overlapping(
    account: ClusterAccount, *, start: dt.datetime, end: dt.datetime
) -> list[JobSegment]:
    """The account's runs (segments of jobs) that overlap [start, end)."""
    return list(
        JobSegment.objects.filter(job__account=account, started_at__lt=end, ended_at__gt=start)
    )


def jobs_touching(account: ClusterAccount, *, start: dt.datetime, end: dt.datetime) -> list[Job]:
    """The account's jobs submitted in [start, end), or with a run overlapping it, or running
    through it, oldest submission first."""
    segments = JobSegment.objects.filter(
        job__account=account, started_at__lt=end, ended_at__gt=start
    )
    return list(
        Job.objects.filter(account=account)
        .filter(
            Q(submitted_at__gte=start, submitted_at__lt=end)
            | Q(pk__in=segments.values("job_id"))
            | Q(started_at__lt=end, ended_at__isnull=True, state=Job.State.RUNNING)
            | Q(started_at__lt=end, ended_at__gt=start)
        )
        .order_by("submitted_at")
    )
