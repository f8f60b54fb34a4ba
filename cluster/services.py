"""Writes of the cluster context: accounts and limits, submitting and cancelling jobs,
syncing the scheduler's accounting into job rows and the GPU ledger, storage quotas."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from cluster.backends import cluster_backend
from cluster.backends.base import (
    AccountingRow,
    AccountLimits,
    ClusterBackend,
    JobRequest,
    SubmitRefused,
)
from cluster.models import ClusterAccount, GpuLedger, Job, JobSegment
from cluster.reasons import pending_reason

log = logging.getLogger(__name__)

_ACCOUNT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,100}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
GIB = 1024**3


def account_ensure(
    *,
    name: str,
    unix_user: str,
    period: str,
    limits: AccountLimits,
    storage_gib: int,
    backend: ClusterBackend | None = None,
) -> ClusterAccount:
    """Create or update an account and put its limits into force in the scheduler."""
    if not _ACCOUNT_NAME.match(name):
        raise ValueError(f"account name {name!r}: use lowercase letters, digits and _ (max 63)")
    if (
        limits.gpu_hours < 0
        or min(limits.max_gpus, limits.max_preemptible_gpus, limits.max_job_hours) < 0
    ):
        raise ValueError("limits cannot be negative")
    previous_period = (
        ClusterAccount.objects.filter(name=name).values_list("period", flat=True).first()
    )
    account, _ = ClusterAccount.objects.update_or_create(
        name=name,
        defaults={
            "unix_user": unix_user,
            "period": period,
            "gpu_hours_limit": Decimal(str(limits.gpu_hours)),
            "max_gpus": limits.max_gpus,
            "max_preemptible_gpus": limits.max_preemptible_gpus,
            "max_job_hours": limits.max_job_hours,
            "storage_gib_limit": storage_gib,
        },
    )
    GpuLedger.objects.get_or_create(account=account, period=period)
    backend = backend or cluster_backend()
    backend.account_apply(account=name, unix_user=unix_user, limits=limits)
    if previous_period is not None and previous_period != period:
        # A new phase: its budget starts from zero in the scheduler as in the ledger.
        backend.usage_reset(account=name)
    # The scheduler follows the platform's view, whatever it was left with before.
    backend.account_block(account=name, blocked=bool(account.submissions_blocked_reason))
    return account


def account_close(
    *, account: ClusterAccount, reason: str, backend: ClusterBackend | None = None
) -> None:
    """Stop the account: no new jobs (through any door) and its running ones cancelled."""
    backend = backend or cluster_backend()
    ClusterAccount.objects.filter(pk=account.pk).update(submissions_blocked_reason=reason)
    backend.account_block(account=account.name, blocked=True)
    backend.cancel_all(account=account.name)


def job_submit(
    *, account: ClusterAccount, request: JobRequest, backend: ClusterBackend | None = None
) -> Job:
    """Submit a job for the account, refusing with words the user can act on."""
    _check_request(account, request)
    backend = backend or cluster_backend()
    # Slurm refuses at submit only a job larger than the whole budget; one that is larger
    # than what is left would be accepted and then wait forever. Refuse it here, in words.
    used_hours = backend.charged_gpu_minutes(account=account.name) / 60
    _check_budget(account, request, used_hours)
    try:
        scheduler_id = backend.submit(
            account=account.name, unix_user=account.unix_user, request=request
        )
    except SubmitRefused as refused:
        if "budget" in refused.message:  # usage grew between our check and Slurm's
            _check_budget(account, request, backend.charged_gpu_minutes(account=account.name) / 60)
        raise
    return _job_row(
        account,
        backend,
        scheduler_id,
        request,
        script=request.script,
        stdout_path=str(request.workdir / f"slurm-{scheduler_id}.out"),
    )


def job_submit_callable(
    *,
    account: ClusterAccount,
    request: JobRequest,
    function: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    backend: ClusterBackend | None = None,
) -> Job:
    """Run a Python callable as a job under the account (submitit on Slurm); its return value
    comes back through `job_result`."""
    _check_request(account, request)
    backend = backend or cluster_backend()
    _check_budget(account, request, backend.charged_gpu_minutes(account=account.name) / 60)
    scheduler_id = backend.submit_callable(
        account=account.name,
        unix_user=account.unix_user,
        request=request,
        function=function,
        args=args,
        kwargs=kwargs or {},
    )
    name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
    return _job_row(
        account, backend, scheduler_id, request, script=f"# Python callable {name}", stdout_path=""
    )


def _job_row(
    account: ClusterAccount,
    backend: ClusterBackend,
    scheduler_id: str,
    request: JobRequest,
    *,
    script: str,
    stdout_path: str,
) -> Job:
    return Job.objects.create(
        account=account,
        period=account.period,
        backend=backend.name,
        scheduler_id=scheduler_id,
        name=request.name,
        qos=request.qos,
        nodes=request.nodes,
        gpus=request.gpus,
        time_limit_minutes=request.time_limit_minutes,
        workdir=str(request.workdir),
        script=script,
        stdout_path=stdout_path,
    )


def _check_budget(account: ClusterAccount, request: JobRequest, used_hours: float) -> None:
    left = max(0.0, float(account.gpu_hours_limit) - used_hours)
    asked = request.gpus * request.time_limit_minutes / 60
    if asked > left + 1e-9:
        raise SubmitRefused(
            f"the job would overrun the account's GPU-hour budget: its {request.gpus} GPU(s) for up to "
            f"{request.time_limit_minutes} min could use {asked:.2f} GPU-h and {left:.2f} of "
            f"{float(account.gpu_hours_limit):g} GPU-h are left"
        )


def _check_request(account: ClusterAccount, request: JobRequest) -> None:
    if account.submissions_blocked_reason:
        raise SubmitRefused(
            f"the account may not submit jobs now: {account.submissions_blocked_reason}"
        )
    if not _JOB_NAME.match(request.name):
        raise SubmitRefused("a job name is 1-100 letters, digits and . _ + -")
    if request.nodes < 1 or request.gpus_per_node < 0 or request.time_limit_minutes < 1:
        raise SubmitRefused("a job needs at least one node and a time limit of at least one minute")
    limit_minutes = account.max_job_hours * 60
    if request.time_limit_minutes > limit_minutes:
        raise SubmitRefused(
            f"the time limit of {request.time_limit_minutes / 60:g} h is above the maximum of "
            f"{account.max_job_hours} h per job"
        )
    most = account.max_preemptible_gpus if request.preemptible else account.max_gpus
    if request.gpus > most:
        raise SubmitRefused(
            f"the job asks for {request.gpus} GPUs; the account may use at most {most} at once on the "
            f"{request.qos} QOS"
        )
    if not request.workdir.is_dir():
        raise SubmitRefused(f"the working directory {request.workdir} does not exist")
    bad = [key for key in request.env if not _ENV_KEY.match(key)]
    if bad:
        raise SubmitRefused(f"invalid environment variable names: {', '.join(sorted(bad))}")


def job_cancel(*, job: Job, backend: ClusterBackend | None = None) -> None:
    if job.finished:
        return
    (backend or cluster_backend()).cancel(
        scheduler_id=job.scheduler_id, unix_user=job.account.unix_user
    )


@dataclass(frozen=True)
class SyncReport:
    jobs_seen: int
    jobs_new: int
    segments_charged: int
    gpu_seconds_charged: int


def cluster_sync(
    *,
    backend: ClusterBackend | None = None,
    lookback_days: int = 60,
    account_names: list[str] | None = None,
) -> SyncReport:
    """Pull the scheduler's accounting into job rows and charge every finished run once.

    Idempotent: a segment is identified by (job, start) under a unique constraint, and the
    ledger is incremented in the same transaction as the segment row is inserted — so a sync
    run twice, or two syncs at once, charge nothing twice. Jobs submitted outside the
    platform (plain `sbatch` in a sandbox) are found through their account and recorded too.
    """
    backend = backend or cluster_backend()
    known = ClusterAccount.objects.all()
    if account_names is not None:
        known = known.filter(name__in=account_names)
    accounts = {a.name: a for a in known}
    if not accounts:
        return SyncReport(0, 0, 0, 0)
    # Only jobs from the platform account's lifetime: a Slurm account of the same name may
    # have history from before (a re-provisioned agent, an earlier test run).
    opened = {name: a.created_at.replace(microsecond=0) for name, a in accounts.items()}
    since = max(min(opened.values()), timezone.now() - timedelta(days=lookback_days))
    rows = backend.accounting(accounts=list(accounts), since=since)
    runs: dict[str, list[AccountingRow]] = {}
    for row in rows:
        if row.account not in accounts:
            continue
        if row.submitted_at is not None and row.submitted_at < opened[row.account]:
            continue
        runs.setdefault(row.scheduler_id, []).append(row)
    new = charged_segments = charged_seconds = 0
    for scheduler_id, job_runs in runs.items():
        latest = job_runs[-1]
        if latest.state in Job.FINISHED and latest.ended_at is None:
            # slurmdbd records a job's state and its times in separate messages: a job is
            # finished here only once its accounting is whole, so it is never left unbooked.
            continue
        account = accounts[job_runs[0].account]
        job, created = _job_for(backend.name, scheduler_id, account, job_runs[0])
        new += created
        _update_job(job, latest, job_runs)
        for run in job_runs:
            span = _run_span(run)
            if span is None:
                continue
            seconds = _charge_segment(job, run, *span)
            if seconds is not None:
                charged_segments += 1
                charged_seconds += seconds
    return SyncReport(len(runs), new, charged_segments, charged_seconds)


def _job_for(
    backend: str, scheduler_id: str, account: ClusterAccount, first: AccountingRow
) -> tuple[Job, bool]:
    return Job.objects.get_or_create(
        backend=backend,
        scheduler_id=scheduler_id,
        defaults={
            "account": account,
            "period": account.period,
            "name": first.name[:100],
            "qos": first.qos,
            "nodes": first.nodes,
            "gpus": first.gpus,
            "time_limit_minutes": first.time_limit_minutes,
            "workdir": first.workdir,
            "script": "",  # submitted outside the platform
            "stdout_path": "",
        },
    )


def _update_job(job: Job, latest: AccountingRow, runs: list[AccountingRow]) -> None:
    started = [r.started_at for r in runs if r.started_at is not None]
    Job.objects.filter(pk=job.pk).update(
        state=latest.state if latest.state in Job.State.values else job.state,
        reason=pending_reason(latest.reason_code) if latest.state == "PENDING" else "",
        exit_code=latest.exit_code,
        requeues=max(0, len(started) - 1),
        started_at=started[0] if started else None,
        ended_at=latest.ended_at if latest.state in Job.FINISHED else None,
        gpus=latest.gpus or job.gpus,
    )


# States a run reaches only after it started: such a run is a segment even when accounting
# lost its start time (a job that ran for less than a second).
RAN = {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "REQUEUED"}


def _run_span(run: AccountingRow) -> tuple[datetime, datetime] | None:
    """When a finished run started and ended; None while it runs, or if it never started."""
    if run.ended_at is None:
        return None
    if run.started_at is not None:
        return run.started_at, run.ended_at
    if run.elapsed_seconds > 0 or run.state in RAN:
        return run.ended_at - timedelta(seconds=run.elapsed_seconds), run.ended_at
    return None  # cancelled while pending


def _charge_segment(
    job: Job, run: AccountingRow, started_at: datetime, ended_at: datetime
) -> int | None:
    """Insert the segment and charge it, atomically; None if it was charged before."""
    gpu_seconds = run.gpus * run.elapsed_seconds
    try:
        with transaction.atomic():
            JobSegment.objects.create(
                job=job,
                started_at=started_at,
                ended_at=ended_at,
                state=run.state,
                gpus=run.gpus,
                elapsed_seconds=run.elapsed_seconds,
            )
            ledger, _ = GpuLedger.objects.get_or_create(
                account_id=job.account_id, period=job.period
            )
            GpuLedger.objects.filter(pk=ledger.pk).update(
                gpu_seconds=F("gpu_seconds") + gpu_seconds
            )
            Job.objects.filter(pk=job.pk).update(
                gpu_seconds_charged=F("gpu_seconds_charged") + gpu_seconds
            )
    except IntegrityError:
        return None
    return gpu_seconds


def storage_measure(
    *, account: ClusterAccount, path: Path, backend: ClusterBackend | None = None
) -> int:
    """Measure the disk space the account's sandbox uses; over the quota, the scheduler stops
    accepting its jobs and the account is told why; back under it, submissions resume."""
    used = disk_usage_bytes(path)
    limit = account.storage_gib_limit * GIB
    over = used > limit
    reason = (
        f"the sandbox uses {used / GIB:.1f} GiB, over the storage quota of {account.storage_gib_limit} GiB; "
        "delete files to submit jobs again"
        if over
        else ""
    )
    was_blocked = bool(account.submissions_blocked_reason)
    ClusterAccount.objects.filter(pk=account.pk).update(
        storage_bytes_used=used,
        storage_measured_at=timezone.now(),
        submissions_blocked_reason=reason,
    )
    if over != was_blocked:
        (backend or cluster_backend()).account_block(account=account.name, blocked=over)
    account.refresh_from_db()
    return used


def disk_usage_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (like `du -s`), hard links counted once."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in [*dirs, *files]:
            try:
                info = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            key = (info.st_dev, info.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += info.st_blocks * 512
    return total
