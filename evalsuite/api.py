"""The agent API's evaluation routes: `GET /api/v1/evals` (an agent's own results, proxy
benchmarks only until the competition ends, with its Pareto set and post-peak warning) and
its on-demand runs, `POST`/`GET /api/v1/evals/runs`, `GET /api/v1/evals/runs/<id>` and
`POST /api/v1/evals/runs/<id>/cancel`."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from agents.api import agent_api, error, json_body
from agents.models import Agent
from evalsuite.agent_progress import (
    agent_progress,
    agent_requested_run,
    agent_requested_runs,
    held_out_visible,
    run_json,
)
from evalsuite.models import EvalRun
from evalsuite.on_demand import (
    EvalRequestRefused,
    agent_evaluation_cancel,
    agent_evaluation_request,
)
from evalsuite.selectors import agent_visible_evals
from evalsuite.services import evaluations_collect

MAX_NAMES = 64


@agent_api("GET")
def evals(request: HttpRequest, agent: Agent) -> JsonResponse:
    progress = agent_progress(agent, include_held_out=held_out_visible(agent))
    return JsonResponse({**agent_visible_evals(agent), "progress": progress})


@agent_api("GET", "POST")
def eval_runs(request: HttpRequest, agent: Agent) -> JsonResponse:
    if request.method == "GET":
        _collect_if_queued(agent)
        return JsonResponse({"runs": [run_json(run) for run in agent_requested_runs(agent)]})
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    checkpoint, names = body.get("checkpoint"), body.get("benchmarks", [])
    if not isinstance(checkpoint, int) or isinstance(checkpoint, bool):
        return error(400, "'checkpoint' (one of your checkpoint ids) is required", "bad_request")
    if (
        not isinstance(names, list)
        or len(names) > MAX_NAMES
        or not all(isinstance(name, str) for name in names)
    ):
        return error(400, "'benchmarks' must be a list of benchmark names", "bad_request")
    try:
        run = agent_evaluation_request(agent=agent, checkpoint_id=checkpoint, benchmark_names=names)
    except EvalRequestRefused as refused:
        return error(refused.status, str(refused), refused.code)
    return JsonResponse(run_json(run), status=201)


@agent_api("GET")
def eval_run(request: HttpRequest, agent: Agent, run_id: str) -> JsonResponse:
    run = agent_requested_run(agent, int(run_id)) if _is_run_id(run_id) else None
    if run is None:
        return _no_such_run(run_id)
    if run.state == EvalRun.State.QUEUED:
        evaluations_collect()
        run.refresh_from_db()
    return JsonResponse(run_json(run, items=True))


@agent_api("POST")
def eval_run_cancel(request: HttpRequest, agent: Agent, run_id: str) -> JsonResponse:
    if not _is_run_id(run_id):
        return _no_such_run(run_id)
    try:
        run = agent_evaluation_cancel(agent=agent, run_id=int(run_id))
    except EvalRequestRefused as refused:
        return error(refused.status, str(refused), refused.code)
    return JsonResponse(run_json(run))


def _is_run_id(text: str) -> bool:
    return text.isdecimal() and len(text) < 12


def _no_such_run(run_id: str) -> JsonResponse:
    return error(404, f"you have no evaluation run {run_id[:32]}", "not_found")


def _collect_if_queued(agent: Agent) -> None:
    if EvalRun.objects.filter(
        agent=agent, requested_by_agent=True, state=EvalRun.State.QUEUED
    ).exists():
        evaluations_collect()
