"""Evaluation on demand (issue 14, item 4): an agent runs the proxy benchmarks on one of its own
registered checkpoints while it works, as a cluster job charged to its own account.

What the agent names is hostile: the checkpoint is one of *its* registered ones, looked up by
id (never a path it types), and each benchmark name must be a proxy benchmark of the registry
(a held-out one is refused by name; nothing of it runs or is shown). An agent has at most
`settings.EVALS_AGENT_MAX_QUEUED` runs queued at once; each job takes
`EVALS_AGENT_GPUS` GPUs for at most `EVALS_AGENT_JOB_MINUTES`.

The job goes through the organizers' path (`services.evaluation_job_submit` →
`cluster.services.job_submit_callable`, results stored by `services.evaluations_collect`),
with two differences:
- it is charged to the agent's Slurm account (its GPU-hours, its GPUs at once), though it runs
  as the platform's user, so the agent cannot reach into it or its result. The platform's
  user gets an association in the agent's account for that (`account_apply`);
- there is no contestant to call: the job copies the checkpoint out of the sandbox into its
  own folder (the nominee store's checks: no link followed, bounded sizes, the registered
  weights' sha256), serves the copy with the platform's guarded server (`transformers serve`
  behind a key on a port it binds itself) and runs the benchmarks against it.

The agent may cancel a run of its own while it is queued or running (`agent_evaluation_cancel`):
the cluster layer's `job_cancel` stops the job as the user who submitted it (the platform), the
run becomes CANCELLED, and the scheduler's accounting charges the agent's account for the
time the job ran, as for any cancelled job.

Judge-graded proxy benchmarks run on demand with the judge's calls billed to the agent's own
API credit, never to the organizers': each such run gets a proxy token of the agent's
(`agents.services.judge_token_issue`, kind "judge"), which the job uses to call the judge
upstream through the metered proxy; the calls are the agent's `ProxyCall`s and come off its
credit like its own. The token revokes none of the agent's and is revoked when the run ends
(collected, cancelled, or refused at submission). It lives only in the job's pickled call, in
the run's platform-owned 0700 folder, and the job runs as the platform's user, so the agent
never reads it; and were it to, the token would only bill the agent itself for a model its own
proxy token already reaches. No upstream key ever leaves the proxy. A run is refused when the
agent has less than `EVALS_AGENT_JUDGE_MIN_CREDIT_CENTS` of credit left, or when the
organizers have configured no judge upstream.
"""

from __future__ import annotations

import contextlib
import shutil
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from agents.checkpoints import MIN_FREE_BYTES
from agents.models import Agent, Checkpoint, Nomination, Upstream
from agents.nominees import (
    HEADER_SLACK_BYTES,
    MAX_BYTES_PER_PARAMETER,
    NomineeRefused,
    checkpoint_copy_bytes,
)
from agents.services import judge_token_issue, judge_token_revoke
from arena.competition.selectors import phase_current
from arena.serving.client import Endpoint
from arena.serving.vllm import VllmOptions
from cluster.backends import cluster_backend
from cluster.backends.base import AccountLimits, ClusterBackend, JobRequest
from cluster.models import ClusterAccount
from cluster.sandbox_files import locate
from cluster.services import cluster_sync, job_cancel, platform_unix_user
from cluster.slurm.cli import SlurmError
from evalsuite import hub
from evalsuite.agent_progress import agent_requested_run
from evalsuite.checkpoint_job import CheckpointJob, evaluate_checkpoint
from evalsuite.models import EvalRun
from evalsuite.registry import benchmark, benchmarks

GIB = 1024**3


class EvalRequestRefused(Exception):
    """The request cannot be run; `code` is the API's (arena/api_v1.py gives its status)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def on_demand_benchmarks() -> list[str]:
    """What an agent may run: the proxy benchmarks, in registry order."""
    return [b.name for b in benchmarks() if not b.held_out]


def requested_benchmarks(names: list[str]) -> list[str]:
    """The agent's names checked against the registry, in the order given, each once. None
    named: every on-demand benchmark that needs no judge (a judge bills the agent's credit,
    so it runs only when the agent names its benchmark)."""
    allowed = on_demand_benchmarks()
    if not names:
        return [name for name in allowed if benchmark(name).scorer != "judge"]
    known = {b.name: b for b in benchmarks()}
    chosen: list[str] = []
    for name in names:
        entry = known.get(name)
        if entry is None:
            raise EvalRequestRefused(
                f"there is no benchmark {name[:64]!r}; you may run: {', '.join(allowed)}",
                code="unknown_benchmark",
            )
        if entry.held_out:
            raise EvalRequestRefused(
                f"{name} is a held-out benchmark: agents never run it or see its scores; "
                f"you may run: {', '.join(allowed)}",
                code="held_out_benchmark",
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def agent_evaluation_request(
    *,
    agent: Agent,
    checkpoint_id: int,
    benchmark_names: list[str],
    backend: ClusterBackend | None = None,
) -> EvalRun:
    """Queue an evaluation of one of the agent's registered checkpoints on proxy benchmarks,
    charged to the agent's account; EvalRequestRefused says why not. A run the scheduler
    refuses (the budget is spent, say) is returned FAILED with the reason."""
    names = requested_benchmarks(benchmark_names)
    checkpoint = Checkpoint.objects.filter(agent=agent, pk=checkpoint_id).first()
    if checkpoint is None:
        raise EvalRequestRefused(f"you have no checkpoint {checkpoint_id}", code="not_found")
    phase = phase_current()
    if phase is None:
        raise EvalRequestRefused("no phase has begun", code="no_phase")
    account = agent.cluster_account
    if account is None or not agent.sandbox:
        raise EvalRequestRefused("you have no cluster account or sandbox", code="not_provisioned")
    judged = [name for name in names if benchmark(name).scorer == "judge"]
    if judged:
        _judge_check(agent, judged)
    backend = backend or cluster_backend()
    copy_bytes = _copy_bytes(agent, checkpoint)
    with transaction.atomic():
        Agent.objects.select_for_update().get(pk=agent.pk)  # one request at a time counts
        _copy_room_check(agent, account, copy_bytes)
        limit = max_queued()
        queued = EvalRun.objects.filter(
            agent=agent, requested_by_agent=True, state=EvalRun.State.QUEUED
        ).count()
        if queued >= limit:
            raise EvalRequestRefused(
                f"you have {queued} evaluations queued, the most at once is {limit}; "
                "wait for one to finish",
                code="too_many_runs",
            )
        run = EvalRun.objects.create(
            phase=phase,
            role=EvalRun.Role.AGENT,
            agent=agent,
            checkpoint=checkpoint,
            requested_by_agent=True,
            model_label=f"{agent.name} checkpoint {checkpoint.pk}",
            base_url="",
            served_model_name="",
            benchmarks=names,
            judge_model=_judge_model() if judged else "",
            copy_bytes=copy_bytes,
            log_dir="",
        )
    return _submit(run, agent, checkpoint, account, backend)


def disk_reserve_bytes() -> int:
    """What on-demand copies must leave free on VAR_DIR's filesystem: the margin
    `EVALS_AGENT_DISK_RESERVE_GIB`, and, where the nominee store is on the same filesystem,
    the most the current phase's freeze can copy there (`freeze_room_bytes`)."""
    margin = int(settings.EVALS_AGENT_DISK_RESERVE_GIB * GIB)
    if _device_of(_evals_folder()) != _device_of(Path(settings.AGENTS_NOMINEE_STORE)):
        return margin
    return margin + freeze_room_bytes()


def freeze_room_bytes() -> int:
    """The most the current phase's freeze can write into the nominee store: each nomination
    not yet copied at the largest its checkpoint may be (the nominee copy's own bounds), plus
    the room the store keeps free."""
    phase = phase_current()
    if phase is None:
        return 0
    pending = Nomination.objects.filter(phase=phase).exclude(nominee_copy__folder__gt="")
    largest = settings.AGENTS_NOMINEE_MAX_GIB * GIB
    needed = sum(
        min(parameters * MAX_BYTES_PER_PARAMETER + HEADER_SLACK_BYTES, largest)
        for parameters in pending.values_list("checkpoint__parameters", flat=True)
    )
    return needed + MIN_FREE_BYTES if needed else 0


def _evals_folder() -> Path:
    folder = Path(settings.VAR_DIR) / "evals" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _device_of(path: Path) -> int:
    """The filesystem `path` is on, or would be (its nearest existing folder's)."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(FileNotFoundError):
            return candidate.stat().st_dev
    return -1


def _copy_bytes(agent: Agent, checkpoint: Checkpoint) -> int:
    """What the job's copy of the checkpoint will write, listed now with the job's own checks
    (a sparse, oversized or linked file is refused here, before anything is queued)."""
    try:
        source = locate(Path(agent.sandbox), checkpoint.path)
        return checkpoint_copy_bytes(source, parameters=checkpoint.parameters)
    except (NomineeRefused, OSError) as refused:  # UnsafePath is an OSError
        raise EvalRequestRefused(
            f"checkpoint {checkpoint.pk} cannot be copied for an evaluation: {refused}",
            code="refused",
        ) from None


def _copy_room_check(agent: Agent, account: ClusterAccount, copy_bytes: int) -> None:
    """The copy counts against the agent's storage quota, with its sandbox (as last measured)
    and the copies of its other queued runs; and all queued runs' copies must leave the disk
    reserve free. Called with the agent's row locked, so two requests of one agent never both
    count the same room; two agents' requests at once may, and the job's own check at copy
    time (`checkpoint_job`'s `keep_free_bytes`) still keeps the reserve."""
    queued = EvalRun.objects.filter(requested_by_agent=True, state=EvalRun.State.QUEUED)
    own = queued.filter(agent=agent).aggregate(total=Sum("copy_bytes"))["total"] or 0
    account.refresh_from_db(fields=["storage_bytes_used", "storage_gib_limit"])
    quota = account.storage_gib_limit * GIB
    left = quota - account.storage_bytes_used - own
    if copy_bytes > left:
        raise EvalRequestRefused(
            f"the evaluation copies your checkpoint ({copy_bytes} bytes) onto the platform's "
            f"disk, and that copy counts against your storage quota of "
            f"{account.storage_gib_limit} GiB: your sandbox uses {account.storage_bytes_used} "
            f"bytes and your queued evaluations' copies {own}, so {max(left, 0)} bytes are "
            "left; delete files or wait for a run to end",
            code="limit",
        )
    everyone = queued.aggregate(total=Sum("copy_bytes"))["total"] or 0
    free = shutil.disk_usage(_evals_folder()).free - everyone
    if free - copy_bytes < disk_reserve_bytes():
        raise EvalRequestRefused(
            f"the platform's disk has too little room for another copy of {copy_bytes} bytes "
            "now (the space kept free for the phase's nominees is not lent to evaluations); "
            "try again when other evaluations have ended",
            code="limit",
        )


def _judge_check(agent: Agent, judged: list[str]) -> None:
    """A judged run needs the organizers' judge upstream and some of the agent's credit."""
    from evalsuite.services import JUDGE_UPSTREAM

    if not Upstream.objects.filter(name=JUDGE_UPSTREAM, active=True).exists():
        raise EvalRequestRefused(
            f"{', '.join(judged)} is graded by a judge model and the organizers have set up no "
            f"judge; leave it out, or ask them for the proxy upstream {JUDGE_UPSTREAM!r}",
            code="no_judge",
        )
    agent.refresh_from_db()
    left = agent.credit_limit - agent.credit_spent - agent.credit_reserved
    needed = Decimal(settings.EVALS_AGENT_JUDGE_MIN_CREDIT_CENTS) / 100
    if left < needed:
        raise EvalRequestRefused(
            f"your API credit is spent (${left:.2f} of ${agent.credit_limit:.2f} left): "
            f"{', '.join(judged)} is graded by a judge model whose calls are billed to your "
            f"credit, and a run needs at least ${needed:.2f} of it; leave the judged "
            "benchmarks out, or wait for the next phase's credit",
            code="credit_exhausted",
        )


def _judge_model() -> str:
    from evalsuite.services import JUDGE_UPSTREAM, judge_model_of

    return judge_model_of(Endpoint(base_url="", model=JUDGE_UPSTREAM))


def _judge_endpoint(run: EvalRun, agent: Agent) -> Endpoint | None:
    """The judge for the run's judged benchmarks: the API proxy, with a token of the
    agent's own that bills it (recorded on the run, to be revoked when it ends)."""
    from evalsuite.services import JUDGE_UPSTREAM

    if not run.judge_model:
        return None
    row, token = judge_token_issue(agent=agent)
    run.judge_token = row
    return Endpoint(
        base_url=settings.AGENTS_ARENA_URL.rstrip("/") + "/proxy/v1",
        model=JUDGE_UPSTREAM,
        api_key=token,
    )


def agent_evaluation_cancel(
    *, agent: Agent, run_id: int, backend: ClusterBackend | None = None
) -> EvalRun:
    """Cancel one of the agent's own on-demand runs that is still queued or running: its job
    is cancelled through the cluster layer and the run becomes CANCELLED. Another agent's run
    is not found; a finished one is refused with its state."""
    backend = backend or cluster_backend()
    with transaction.atomic():
        # Locked: `evaluations_collect` claims a queued run by a conditional update, so a
        # run is either collected or cancelled, never both.
        run = (
            EvalRun.objects.select_for_update()
            .filter(agent=agent, requested_by_agent=True, pk=run_id)
            .first()
        )
        if run is None:
            raise EvalRequestRefused(f"you have no evaluation run {run_id}", code="not_found")
        if run.state != EvalRun.State.QUEUED:
            raise EvalRequestRefused(
                f"evaluation run {run_id} is already {run.state}: only a queued or running "
                "run can be cancelled",
                code="run_finished",
            )
        if run.job is not None and run.job.finished:
            raise EvalRequestRefused(
                f"evaluation run {run_id} has already ended (its job {run.job.scheduler_id} is "
                f"{run.job.state}); its results are being collected",
                code="run_finished",
            )
        if run.job is not None:
            try:
                job_cancel(job=run.job, backend=backend, unix_user=platform_unix_user())
            except SlurmError as failed:
                raise EvalRequestRefused(
                    f"the scheduler did not cancel job {run.job.scheduler_id} of run {run_id} "
                    f"({str(failed)[:300]}); try again",
                    code="cancel_failed",
                ) from None
        run.state = EvalRun.State.CANCELLED
        run.error = "cancelled by its agent"
        run.finished_at = timezone.now()
        run.save(update_fields=["state", "error", "finished_at"])
        judge_token_revoke(run.judge_token_id)
    # The job's row learns its end (and its charge) from the scheduler's accounting.
    if agent.cluster_account is not None:
        cluster_sync(backend=backend, account_names=[agent.cluster_account.name])
    return agent_requested_run(agent, run.pk) or run


def max_queued() -> int:
    return settings.EVALS_AGENT_MAX_QUEUED


def _submit(
    run: EvalRun,
    agent: Agent,
    checkpoint: Checkpoint,
    account: ClusterAccount,
    backend: ClusterBackend,
) -> EvalRun:
    # Imported here: services imports this app's runner, and this module is imported by
    # the API at start-up.
    from evalsuite.services import evaluation_job_submit

    workdir = Path(settings.VAR_DIR) / "evals" / "agents" / agent.name / f"run-{run.pk}"
    workdir.mkdir(parents=True, exist_ok=True)
    # The platform's user runs the job and reads its result; the agent has no business here.
    workdir.chmod(0o700)
    charged = _platform_member(account, backend)
    request = JobRequest(
        name=f"agent-eval-{run.pk}",
        script="",
        nodes=1,
        gpus_per_node=settings.EVALS_AGENT_GPUS,
        time_limit_minutes=settings.EVALS_AGENT_JOB_MINUTES,
        preemptible=False,
        workdir=workdir,
    )
    job = checkpoint_job(run, agent, checkpoint, workdir, judge=_judge_endpoint(run, agent))
    run.log_dir = str(workdir / "logs")
    try:
        submitted = evaluation_job_submit(
            run=run,
            account=charged,
            request=request,
            function=evaluate_checkpoint,
            kwargs={"job": job},
            backend=backend,
        )
    except BaseException:
        judge_token_revoke(run.judge_token_id)  # never submitted: no job holds the token
        raise
    if submitted.state != EvalRun.State.QUEUED:
        judge_token_revoke(submitted.judge_token_id)  # refused: nothing will call the judge
    return submitted


def checkpoint_job(
    run: EvalRun, agent: Agent, checkpoint: Checkpoint, workdir: Path, *, judge: Endpoint | None
) -> CheckpointJob:
    """What the run's job is given: its copy is bounded by the bytes counted for it when the
    run was requested, and must leave the disk reserve free."""
    return CheckpointJob(
        sandbox=agent.sandbox,
        checkpoint_path=checkpoint.path,
        parameters=checkpoint.parameters,
        weights_sha256=checkpoint.weights_sha256,
        folder=str(workdir),
        benchmark_names=list(run.benchmarks),
        max_tokens=settings.EVALS_AGENT_MAX_TOKENS,
        hub_cache=str(hub.cache_dir()),
        server=settings.EVALS_SERVER,
        vllm=VllmOptions(
            dtype=settings.EVALS_VLLM_DTYPE,
            max_model_len=settings.EVALS_VLLM_MAX_MODEL_LEN,
            gpu_memory_utilization=settings.EVALS_VLLM_GPU_MEMORY_UTILIZATION,
            tensor_parallel_size=max(1, settings.EVALS_AGENT_GPUS),
        ),
        judge=judge,
        max_copy_bytes=run.copy_bytes,
        keep_free_bytes=disk_reserve_bytes(),
    )


def _platform_member(account: ClusterAccount, backend: ClusterBackend) -> ClusterAccount:
    """The agent's account as the platform's user submits to it: the scheduler charges the
    account, and the job runs as the platform (Python callables always do)."""
    platform_user = platform_unix_user()
    backend.account_apply(
        account=account.name,
        unix_user=platform_user,
        limits=AccountLimits(
            gpu_hours=float(account.gpu_hours_limit),
            max_gpus=account.max_gpus,
            max_preemptible_gpus=account.max_preemptible_gpus,
            max_job_hours=account.max_job_hours,
            platform=account.platform,
        ),
    )
    member = ClusterAccount.objects.get(pk=account.pk)
    member.unix_user = platform_user  # this submission only; never saved
    return member
