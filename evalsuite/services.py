"""Writes of the evaluation suite: queue evaluation jobs on the cluster, collect their results.

The phase engine calls `evaluations_queue` when a phase freezes (with the contestants it is
about to serve, the base and instruct references among them) and `evaluations_collect`
periodically (or `manage.py evals collect`) until every run is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, Checkpoint, Nomination, Upstream
from agents.services import agent_create, judge_token_revoke, token_issue
from arena.competition.models import Phase
from arena.serving.client import Endpoint
from arena.serving.models import Contestant
from cluster.backends import cluster_backend
from cluster.backends.base import ClusterBackend, JobRequest, SubmitRefused
from cluster.models import ClusterAccount, Job
from cluster.selectors import job_result
from cluster.services import cluster_sync, job_submit_callable, platform_account_ensure
from evalsuite import hub
from evalsuite.models import BenchmarkResult, EvalRun, ItemResult
from evalsuite.registry import Benchmark, benchmark, benchmarks
from evalsuite.runner import DEFAULT_MAX_TOKENS, BenchmarkOutcome, run_benchmarks

log = logging.getLogger(__name__)

# The organizer's cluster account for evaluation jobs, and its budget per phase.
EVAL_ACCOUNT = "organizer_evals"
EVAL_GPU_HOURS = 200
EVAL_JOB_MINUTES = 180
# The judge: an upstream of the API proxy under this name, paid from an organizer agent's
# credit (one agent per phase, so each phase's judging has its own budget).
JUDGE_UPSTREAM = "judge"
JUDGE_CREDIT_USD = Decimal("50")


def eval_account_ensure(*, phase: Phase, backend: ClusterBackend | None = None) -> ClusterAccount:
    """The organizer's evaluation account, booked against the phase."""
    return platform_account_ensure(
        name=EVAL_ACCOUNT, period=phase.label, gpu_hours=EVAL_GPU_HOURS, backend=backend
    )


def judge_agent_name(phase: Phase) -> str:
    return f"evals-judge-{phase.label}"[:32]


def judge_endpoint_issue(
    *, phase: Phase, upstream: str = JUDGE_UPSTREAM, credit_usd: Decimal = JUDGE_CREDIT_USD
) -> Endpoint | None:
    """A fresh proxy token for the phase's judge agent (revoking its earlier one), or None
    when the proxy has no such upstream. Judge calls are metered like any agent's."""
    if not Upstream.objects.filter(name=upstream, active=True).exists():
        return None
    judge = Agent.objects.filter(name=judge_agent_name(phase)).first()
    if judge is None:
        judge = agent_create(name=judge_agent_name(phase), credit_limit=credit_usd)
    token = token_issue(agent=judge, kind="proxy")
    return Endpoint(
        base_url=settings.AGENTS_ARENA_URL.rstrip("/") + "/proxy/v1", model=upstream, api_key=token
    )


def fortress_judges_missing() -> list[str]:
    """The configured FORTRESS judge upstreams the proxy has no active upstream for."""
    active = set(
        Upstream.objects.filter(name__in=settings.EVALS_FORTRESS_JUDGES, active=True).values_list(
            "name", flat=True
        )
    )
    return [name for name in settings.EVALS_FORTRESS_JUDGES if name not in active]


def judge_model_of(judge: Endpoint | None) -> str:
    """What the reports name as the judge: the proxy upstream and the model behind it."""
    if judge is None:
        return ""
    upstream = Upstream.objects.filter(name=judge.model).first()
    return f"{upstream.upstream_model} (upstream {upstream.name})" if upstream else judge.model


def evaluations_queue(
    *,
    phase: Phase,
    contestants: list[Contestant],
    benchmark_names: list[str] | None = None,
    batch_size: int | None = None,
    judge_upstream: str = JUDGE_UPSTREAM,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    backend: ClusterBackend | None = None,
) -> list[EvalRun]:
    """One evaluation job per contestant and batch of benchmarks (all 20 in one batch unless
    `batch_size` says otherwise). Contestants serving the competition's base or instruct
    model are evaluated as those references; others are matched to the agent's checkpoint
    through its phase entry's nomination (it is served from the platform's copy)."""
    names = benchmark_names or [entry.name for entry in benchmarks()]
    for name in names:
        benchmark(name)  # a typo fails here, not in the job
    size = batch_size or len(names)
    batches = [names[i : i + size] for i in range(0, len(names), size)]
    backend = backend or cluster_backend()
    account = eval_account_ensure(phase=phase, backend=backend)
    needs_judge = any(benchmark(name).scorer == "judge" for name in names)
    judge = judge_endpoint_issue(phase=phase, upstream=judge_upstream) if needs_judge else None
    # FORTRESS's panel: its judge upstreams through the same proxy, with the judge's token
    fortress_judges = (
        [replace(judge, model=upstream) for upstream in settings.EVALS_FORTRESS_JUDGES]
        if judge is not None and "fortress" in names
        else []
    )
    runs = []
    for contestant in contestants:
        for batch in batches:
            runs.append(
                evaluation_submit(
                    phase=phase,
                    contestant=contestant,
                    benchmark_names=batch,
                    account=account,
                    judge=judge,
                    fortress_judges=fortress_judges if "fortress" in batch else [],
                    max_tokens=max_tokens,
                    backend=backend,
                )
            )
    return runs


def evaluation_submit(
    *,
    phase: Phase,
    contestant: Contestant,
    benchmark_names: list[str],
    account: ClusterAccount,
    judge: Endpoint | None,
    backend: ClusterBackend,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    fortress_judges: list[Endpoint] | None = None,
) -> EvalRun:
    """Record the run and submit its job; a refused submission leaves the run FAILED, with
    the scheduler's reason."""
    role, agent, checkpoint = _who(phase, contestant)
    run = EvalRun.objects.create(
        phase=phase,
        role=role,
        agent=agent,
        checkpoint=checkpoint,
        contestant=contestant,
        model_label=contestant.display_name,
        base_url=contestant.base_url,
        served_model_name=contestant.served_model_name,
        benchmarks=benchmark_names,
        judge_model=judge_model_of(judge),
        fortress_judges=[judge_model_of(panelist) for panelist in fortress_judges or []],
        log_dir="",
    )
    workdir = Path(settings.VAR_DIR) / "evals" / phase.label / f"run-{run.pk}"
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)  # Slurm nodes read the pickled call and write the result here
    run.log_dir = str(workdir / "logs")
    endpoint = Endpoint(
        base_url=contestant.base_url,
        model=contestant.served_model_name,
        api_key=contestant.api_key,
    )
    request = JobRequest(
        name=f"eval-{run.pk}", script="", nodes=1, gpus_per_node=0,
        time_limit_minutes=EVAL_JOB_MINUTES, preemptible=False, workdir=workdir,
    )  # fmt: skip
    return evaluation_job_submit(
        run=run,
        account=account,
        request=request,
        function=run_benchmarks,
        kwargs={
            "endpoint": endpoint,
            "benchmark_names": benchmark_names,
            "log_dir": run.log_dir,
            "judge": judge,
            "fortress_judges": fortress_judges or None,
            "max_tokens": max_tokens,
            "hub_cache": str(hub.cache_dir()),
        },
        backend=backend,
    )


def evaluation_job_submit(
    *,
    run: EvalRun,
    account: ClusterAccount,
    request: JobRequest,
    function: Callable[..., list[BenchmarkOutcome]],
    kwargs: dict[str, Any],
    backend: ClusterBackend,
) -> EvalRun:
    """Submit the run's job (a callable returning its outcomes, which `evaluations_collect`
    stores); a refused submission leaves the run FAILED, with the scheduler's reason. Used by
    the organizers' evaluations and the agents' on-demand ones (`on_demand.py`)."""
    try:
        run.job = job_submit_callable(
            account=account, request=request, function=function, kwargs=kwargs, backend=backend
        )
    except SubmitRefused as refused:
        run.state = EvalRun.State.FAILED
        run.error = f"not submitted: {refused.message}"
        run.finished_at = timezone.now()
    run.save()
    return run


def _who(phase: Phase, contestant: Contestant) -> tuple[str, Agent | None, Checkpoint | None]:
    competition = phase.competition
    path = contestant.checkpoint_path
    if path and path == competition.base_model:
        return EvalRun.Role.BASE, None, None
    if path and path == competition.instruct_model:
        return EvalRun.Role.INSTRUCT, None, None
    # A nominee is served from the platform's copy (agents/nominees.py): its phase entry
    # names the nomination; a path in a sandbox only for contestants made before copies.
    nomination = (
        Nomination.objects.filter(phase=phase, phase_contestant__contestant=contestant)
        .select_related("checkpoint__agent")
        .first()
    ) or (
        Nomination.objects.filter(phase=phase, checkpoint__path=path)
        .select_related("checkpoint__agent")
        .first()
        if path
        else None
    )
    checkpoint = (
        nomination.checkpoint
        if nomination
        else Checkpoint.objects.filter(path=path).order_by("-created_at").first()
        if path
        else None
    )
    return EvalRun.Role.AGENT, checkpoint.agent if checkpoint else None, checkpoint


def evaluations_collect(*, backend: ClusterBackend | None = None) -> list[EvalRun]:
    """Store the results of every queued run whose job has finished; returns those runs.
    Safe to run from several workers: a run is claimed by a conditional update."""
    backend = backend or cluster_backend()
    cluster_sync(backend=backend)
    collected = []
    pending = EvalRun.objects.filter(state=EvalRun.State.QUEUED, job__isnull=False)
    for run in pending.select_related("job"):
        job: Job = run.job  # type: ignore[assignment]
        if not job.finished:
            continue
        try:
            outcomes = job_result(job, backend=backend) if job.state == "COMPLETED" else None
            error = "" if outcomes is not None else f"the evaluation job ended {job.state}"
        except Exception as exc:  # what the job raised, re-raised by the backend
            outcomes, error = None, f"the evaluation job failed: {type(exc).__name__}: {exc}"
        if _store(run, outcomes, error):
            run.refresh_from_db()
            collected.append(run)
    return collected


@transaction.atomic
def _store(run: EvalRun, outcomes: list[BenchmarkOutcome] | None, error: str) -> bool:
    state = EvalRun.State.DONE if outcomes is not None else EvalRun.State.FAILED
    claimed = EvalRun.objects.filter(pk=run.pk, state=EvalRun.State.QUEUED).update(
        state=state, error=error[:5000], finished_at=timezone.now()
    )
    if not claimed:
        return False  # another worker collected it
    judge_token_revoke(run.judge_token_id)  # an on-demand run's judge bills its agent no more
    for outcome in outcomes or []:
        entry = benchmark(outcome.benchmark)
        judges = _judges(run, entry)
        result = BenchmarkResult.objects.create(
            run=run,
            benchmark=entry.name,
            domain=entry.domain,
            kind=entry.kind,
            held_out=entry.held_out,
            score=outcome.score,
            stderr=outcome.stderr,
            n=outcome.n,
            judge_model=_judge_names(entry, judges),
            judges=judges,
            log_path=outcome.log_path,
            error=outcome.error,
            metrics={
                name: {"score": s.value, "stderr": s.stderr, "n": s.n}
                for name, s in outcome.metrics.items()
            },
        )
        ItemResult.objects.bulk_create(
            ItemResult(
                result=result,
                item_id=item.item_id,
                value=item.value,
                answer=item.answer,
                explanation=item.explanation,
            )
            for item in outcome.items
        )
    return True


def _judges(run: EvalRun, entry: Benchmark) -> list[str]:
    """The models that graded the benchmark in this run: none for a rule, FORTRESS's panel
    (the judge alone when none was queued), else the judge."""
    if entry.scorer != "judge" or not run.judge_model:
        return []
    if entry.rubric == "fortress" and run.fortress_judges:
        return list(run.fortress_judges)
    return [run.judge_model]


def _judge_names(entry: Benchmark, judges: list[str]) -> str:
    """The judges as the report names them. FORTRESS graded by one judge (only ever what an
    organizer configured) says so: the benchmark's own grading is a panel of three."""
    names = "; ".join(judges)
    if entry.rubric == "fortress" and len(judges) == 1:
        names += " (one judge, as configured: FORTRESS is graded by three)"
    return names[:300]
