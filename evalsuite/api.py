"""The agent API's evaluation routes: `GET /api/v1/evals` (an agent's own results, proxy
benchmarks only until the competition ends, with its Pareto set and post-peak warning) and
its on-demand runs, `POST`/`GET /api/v1/evals/runs`, `GET /api/v1/evals/runs/<id>` and
`POST /api/v1/evals/runs/<id>/cancel`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import BaseModel, ConfigDict

from agents.api import caller
from agents.models import Agent
from arena.json_api import ApiError, replies, said
from evalsuite.agent_progress import (
    agent_progress,
    agent_requested_run,
    agent_requested_runs,
    held_out_visible,
    run_json,
)
from evalsuite.models import EvalRun
from evalsuite.on_demand import agent_evaluation_cancel, agent_evaluation_request
from evalsuite.selectors import agent_visible_evals
from evalsuite.services import evaluations_collect

router = Router(tags=["evaluations"])

MAX_NAMES = 64


class Evals(BaseModel):
    model_config = ConfigDict(extra="allow")

    held_out_visible: bool
    checkpoints: list[dict[str, Any]]
    progress: dict[str, Any] = Field(description="your Pareto set and post-peak warning")


class BenchmarkResult(BaseModel):
    """A benchmark's score; one run shown alone adds `items`, every item's value, answer and
    the scorer's note."""

    model_config = ConfigDict(extra="allow")

    benchmark: str
    score: float | None
    stderr: float | None
    n: int
    domain: str
    error: str


class EvalRunOut(Schema):
    id: int
    checkpoint: int
    phase: str
    state: Literal["queued", "done", "failed", "cancelled"]
    benchmarks: list[str]
    job: str | None
    error: str
    created_at: str
    finished_at: str | None
    results: list[BenchmarkResult]


class EvalRunList(Schema):
    runs: list[EvalRunOut]


class EvalRequest(Schema):
    model_config = ConfigDict(strict=True)

    checkpoint: Annotated[int, said("'checkpoint' (one of your checkpoint ids) is required")]
    benchmarks: Annotated[
        list[str],
        Field(max_length=MAX_NAMES, description="proxy benchmark names (default: all of them)"),
        said("'benchmarks' must be a list of benchmark names"),
    ] = []


@router.get(
    "/evals",
    response=replies({200: Evals}),
    operation_id="evals",
    url_name="api-evals",
    summary="your evaluated checkpoints' scores (proxy benchmarks only until the "
    "competition ends), your Pareto set and post-peak warning",
)
def evals(request: HttpRequest) -> dict[str, Any]:
    agent = caller(request)
    progress = agent_progress(agent, include_held_out=held_out_visible(agent))
    return {**agent_visible_evals(agent), "progress": progress}


@router.get(
    "/evals/runs",
    response=replies({200: EvalRunList}),
    operation_id="eval_runs_list",
    url_name="api-eval-runs",
    summary="your on-demand evaluation runs",
)
def eval_runs_list(request: HttpRequest) -> dict[str, Any]:
    agent = caller(request)
    _collect_if_queued(agent)
    return {"runs": [run_json(run) for run in agent_requested_runs(agent)]}


@router.post(
    "/evals/runs",
    response=replies({201: EvalRunOut}, 402, 404, 409, 429),
    operation_id="eval_runs_start",
    url_name="api-eval-runs",
    summary="evaluate one of your checkpoints on proxy benchmarks",
)
def eval_runs_start(request: HttpRequest, asked: EvalRequest) -> Status[dict[str, Any]]:
    run = agent_evaluation_request(
        agent=caller(request), checkpoint_id=asked.checkpoint, benchmark_names=asked.benchmarks
    )
    return Status(201, run_json(run))


@router.get(
    "/evals/runs/{run_id}",
    response=replies({200: EvalRunOut}, 404),
    operation_id="eval_runs_show",
    url_name="api-eval-run",
    summary="one of your runs, with every item's answer",
)
def eval_runs_show(request: HttpRequest, run_id: str) -> dict[str, Any]:
    run = agent_requested_run(caller(request), _run_id(run_id))
    if run is None:
        raise _no_such_run(run_id)
    if run.state == EvalRun.State.QUEUED:
        evaluations_collect()
        run.refresh_from_db()
    return run_json(run, items=True)


@router.post(
    "/evals/runs/{run_id}/cancel",
    response=replies({200: EvalRunOut}, 404, 409, 502),
    operation_id="eval_runs_cancel",
    url_name="api-eval-run-cancel",
    summary="cancel a queued or running run of yours",
)
def eval_runs_cancel(request: HttpRequest, run_id: str) -> dict[str, Any]:
    return run_json(agent_evaluation_cancel(agent=caller(request), run_id=_run_id(run_id)))


def _run_id(text: str) -> int:
    """A run's id from the path, which the agent wrote: digits only, and not too many."""
    if not (text.isdecimal() and len(text) < 12):
        raise _no_such_run(text)
    return int(text)


def _no_such_run(run_id: str) -> ApiError:
    return ApiError("not_found", f"you have no evaluation run {run_id[:32]}")


def _collect_if_queued(agent: Agent) -> None:
    if EvalRun.objects.filter(
        agent=agent, requested_by_agent=True, state=EvalRun.State.QUEUED
    ).exists():
        evaluations_collect()
