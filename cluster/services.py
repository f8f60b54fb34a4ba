"""Writes of the cluster context: accounts and limits, submitting and cancelling jobs,
syncing the scheduler's accounting into job rows and the GPU ledger, storage quotas."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
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
from cluster.reasons import pending_reason, submit_error
from cluster.sandbox_files import UnsafePath, disk_usage

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
    storage_path: Path | None = None,
    reopen: bool = False,
    backend: ClusterBackend | None = None,
) -> ClusterAccount:
    """Create or update an account and put its limits into force in the scheduler.
    `storage_path` is the sandbox measured against the quota (unchanged when None). `reopen`
    lifts the organizers' closing (`account_close`), as re-provisioning does; a storage block
    stays, since only `storage_measure` may lift it."""
    if not _ACCOUNT_NAME.match(name):
        raise ValueError(f"account name {name!r}: use lowercase letters, digits and _ (max 63)")
    if (
        limits.gpu_hours < 0
        or min(limits.max_gpus, limits.max_preemptible_gpus, limits.max_job_hours) < 0
    ):
        raise ValueError("limits cannot be negative")
    if limits.platform and limits.max_preemptible_gpus:
        raise ValueError("an organizers' account has no preemptible GPUs")
    previous_period = (
        ClusterAccount.objects.filter(name=name).values_list("period", flat=True).first()
    )
    defaults: dict[str, Any] = {
        "unix_user": unix_user,
        "period": period,
        "gpu_hours_limit": Decimal(str(limits.gpu_hours)),
        "max_gpus": limits.max_gpus,
        "max_preemptible_gpus": limits.max_preemptible_gpus,
        "max_job_hours": limits.max_job_hours,
        "platform": limits.platform,
        "storage_gib_limit": storage_gib,
    }
    if storage_path is not None:
        defaults["storage_path"] = str(storage_path)
    if reopen:
        defaults["submissions_blocked_reason"] = ""
    account, _ = ClusterAccount.objects.update_or_create(name=name, defaults=defaults)
    GpuLedger.objects.get_or_create(account=account, period=period)
    backend = backend or cluster_backend()
    backend.account_apply(account=name, unix_user=unix_user, limits=limits)
    # The scheduler follows the platform's view, whatever it was left with before.
    backend.account_block(account=name, blocked=bool(account.blocked_reason))
    if previous_period is not None and previous_period != period:
        # A new phase: its budget starts from zero in the scheduler as in the ledger. Last,
        # so that nothing here fails after it: the new period is saved with the caller's
        # transaction, and a retry after a failure before this line finds no reset done yet,
        # while a retry after it finds the period already changed and resets nothing.
        backend.usage_reset(account=name)
    return account


# The organizers' own accounts (serving, evaluation) share their shape: GPUs on a QOS of
# their own, none preemptible, and the platform's own Unix user submitting.
PLATFORM_MAX_GPUS = 8
PLATFORM_MAX_JOB_HOURS = 24
PLATFORM_STORAGE_GIB = 100


def platform_unix_user() -> str:
    """The Unix user the platform runs as: the one member of its own accounts. submitit
    pickles a call through a folder this user owns, so its jobs run as it."""
    return pwd.getpwuid(os.getuid()).pw_name


def platform_account_ensure(
    *, name: str, period: str, gpu_hours: float, backend: ClusterBackend | None = None
) -> ClusterAccount:
    """One of the organizers' own accounts (serving, evaluation), booked against `period`
    with `gpu_hours` for it. Its QOS is its own, so the agents' limits stay as the phase set
    them."""
    return account_ensure(
        name=name,
        unix_user=platform_unix_user(),
        period=period,
        limits=AccountLimits(
            gpu_hours=gpu_hours,
            max_gpus=PLATFORM_MAX_GPUS,
            max_preemptible_gpus=0,
            max_job_hours=PLATFORM_MAX_JOB_HOURS,
            platform=True,
        ),
        storage_gib=PLATFORM_STORAGE_GIB,
        backend=backend,
    )


def account_close(
    *, account: ClusterAccount, reason: str, backend: ClusterBackend | None = None
) -> None:
    """Stop the account: no new jobs (through any door) and its running ones cancelled.
    Only re-provisioning opens it again; its storage falling under the quota does not."""
    backend = backend or cluster_backend()
    with transaction.atomic():
        # The UPDATE holds the row lock `storage_measure` takes until the scheduler is told,
        # so a measurement in flight cannot unblock the account after this closed it.
        ClusterAccount.objects.filter(pk=account.pk).update(submissions_blocked_reason=reason)
        backend.account_block(account=account.name, blocked=True)
    backend.cancel_all(account=account.name)


def job_submit(
    *, account: ClusterAccount, request: JobRequest, backend: ClusterBackend | None = None
) -> Job:
    """Submit a job for the account, refusing with words the user can act on."""
    request = _check_request(account, request)
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
        raise _in_words(refused, account) from None
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
    request = _check_request(account, request)
    backend = backend or cluster_backend()
    _check_budget(account, request, backend.charged_gpu_minutes(account=account.name) / 60)
    try:
        scheduler_id = backend.submit_callable(
            account=account.name,
            unix_user=account.unix_user,
            request=request,
            function=function,
            args=args,
            kwargs=kwargs or {},
        )
    except SubmitRefused as refused:
        raise _in_words(refused, account) from None
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
            f"{float(account.gpu_hours_limit):g} GPU-h are left",
            code="over_budget",
        )


def _in_words(refused: SubmitRefused, account: ClusterAccount) -> SubmitRefused:
    """The scheduler's refusal said again with what only the platform knows of the account
    (its maximum hours per job, why it is blocked)."""
    if not refused.detail:
        return refused
    message = submit_error(
        refused.detail, max_job_hours=account.max_job_hours, blocked_reason=account.blocked_reason
    )
    return SubmitRefused(message, detail=refused.detail, code=refused.code)


def _check_request(account: ClusterAccount, request: JobRequest) -> JobRequest:
    """The request as it will be submitted for this account, or SubmitRefused in words."""
    if account.blocked_reason:
        raise SubmitRefused(f"the account may not submit jobs now: {account.blocked_reason}")
    if account.platform and request.preemptible:
        raise SubmitRefused("the organizers' accounts have no preemptible QOS")
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
        # Named back bounded: the names are the caller's, and there may be thousands.
        shown = ", ".join(name[:64] for name in sorted(bad)[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise SubmitRefused(f"invalid environment variable names: {shown}{more}")
    return replace(request, platform=account.platform)


def job_cancel(
    *, job: Job, backend: ClusterBackend | None = None, unix_user: str | None = None
) -> None:
    """Cancel the job as the Unix user who submitted it: the account's own user, unless
    `unix_user` says otherwise (the platform submits agents' on-demand evaluations to their
    accounts as itself, and only it may cancel them)."""
    if job.finished:
        return
    (backend or cluster_backend()).cancel(
        scheduler_id=job.scheduler_id, unix_user=unix_user or job.account.unix_user
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
    # GPU-equivalents, as the scheduler bills them (CPUs and memory weighed as GPUs)
    billed = run.gpus if run.gpu_equivalents is None else run.gpu_equivalents
    gpu_seconds = billed * run.elapsed_seconds
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
    *, account: ClusterAccount, path: Path | None = None, backend: ClusterBackend | None = None
) -> int:
    """Measure the disk space the account's sandbox (`path`, else its `storage_path`) uses.
    Over the quota, the scheduler stops accepting its jobs and the account is told why; back
    under it, the storage block is lifted, and submissions resume unless the account is
    blocked for another reason."""
    path = path or (Path(account.storage_path) if account.storage_path else None)
    if path is None:
        raise ValueError(f"account {account.name} has no sandbox to measure")
    used = disk_usage_bytes(path)
    over = used > account.storage_gib_limit * GIB
    reason = (
        f"the sandbox uses {used / GIB:.1f} GiB, over the storage quota of "
        f"{account.storage_gib_limit} GiB; delete files to submit jobs again"
        if over
        else ""
    )
    with transaction.atomic():
        locked = ClusterAccount.objects.select_for_update().get(pk=account.pk)
        was_blocked = bool(locked.blocked_reason)
        locked.storage_bytes_used = used
        locked.storage_measured_at = timezone.now()
        locked.storage_blocked_reason = reason
        locked.save(
            update_fields=["storage_bytes_used", "storage_measured_at", "storage_blocked_reason"]
        )
        if bool(locked.blocked_reason) != was_blocked:
            (backend or cluster_backend()).account_block(
                account=account.name, blocked=bool(locked.blocked_reason)
            )
    account.refresh_from_db()
    return used


@dataclass(frozen=True)
class StorageLine:
    account: str
    bytes_used: int
    limit_gib: int
    blocked_reason: str  # "" when the account may submit


def storage_measure_all(*, backend: ClusterBackend | None = None) -> list[StorageLine]:
    """Measure every open account that has a sandbox: the agents'. Closed accounts (a
    deprovisioned agent's sandbox is kept for the audit) and the organizers' are skipped.

    One account's sandbox failing to be measured (an agent renaming folders in a loop while
    it is walked, say) is logged and recorded against that account alone, which is then
    treated as over its quota: its submissions stop until a measurement succeeds. The others
    are measured all the same."""
    backend = backend or cluster_backend()
    lines = []
    open_accounts = ClusterAccount.objects.exclude(storage_path="").filter(
        submissions_blocked_reason=""
    )
    for account in open_accounts:
        try:
            used = storage_measure(account=account, backend=backend)
        except Exception as failed:
            log.warning("storage of account %s could not be measured: %s", account.name, failed)
            _storage_unmeasurable(account=account, failure=str(failed), backend=backend)
            used = account.storage_bytes_used
        lines.append(
            StorageLine(account.name, used, account.storage_gib_limit, account.blocked_reason)
        )
    return lines


def _storage_unmeasurable(
    *, account: ClusterAccount, failure: str, backend: ClusterBackend
) -> None:
    """Block the account's submissions as if over its quota, saying why."""
    reason = (
        f"the sandbox could not be measured ({failure}); submissions stop until it can be: "
        "stop moving folders while the platform measures them"
    )[:300]
    with transaction.atomic():
        locked = ClusterAccount.objects.select_for_update().get(pk=account.pk)
        was_blocked = bool(locked.blocked_reason)
        locked.storage_measured_at = timezone.now()
        locked.storage_blocked_reason = reason
        locked.save(update_fields=["storage_measured_at", "storage_blocked_reason"])
    account.refresh_from_db()
    if not was_blocked:  # job_submit refuses on the reason above; the scheduler too, if it can
        try:
            backend.account_block(account=account.name, blocked=True)
        except Exception as failed:
            log.warning("the scheduler could not block account %s: %s", account.name, failed)


def disk_usage_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (like `du -s`): blocks, so a sparse file counts
    what it uses; hard links once; links never followed; any depth (see `sandbox_files`).
    A folder the agent moves while it is measured stops that walk; it is measured again."""
    for _ in range(2):
        with contextlib.suppress(UnsafePath):
            return disk_usage(path)
    return disk_usage(path)
