"""The agent API, `/api/v1/`: token auth (`Authorization: Bearer arena_api_…`), JSON in and
out, every error as `{"error": {"message", "code"}}`. Thin: each view parses, calls one
service, shapes the reply. The schema is served at `/api/v1/openapi.json`."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.api_schema import OPENAPI
from agents.journal import JournalRefused, journal_add, journal_entries
from agents.models import Agent, Checkpoint, DataRecord, JournalEntry, Nomination
from agents.selectors import agent_budget, agent_for_token, agent_job
from agents.services import RegistrationRefused, checkpoint_register, data_register, nomination_set
from agents.trajectory import ToolCallRefused, TrajectoryDayFull, api_call_record, tool_call_record
from cluster.backends.base import JobRequest, SubmitRefused
from cluster.models import Job
from cluster.sandbox_files import UnsafePath, kind_of, locate
from cluster.selectors import job_output
from cluster.services import cluster_sync, job_cancel, job_submit

View = Callable[..., JsonResponse]


def error(status: int, message: str, code: str) -> JsonResponse:
    return JsonResponse({"error": {"message": message, "code": code}}, status=status)


def agent_api(*methods: str, record_body: bool = True) -> Callable[[View], View]:
    """An agent API view: token auth, allowed methods, and each authenticated call recorded
    in the agent's trajectory (`agents.trajectory`; `record_body=False` for a view whose body
    is recorded as an event of its own)."""

    def decorate(view: View) -> View:
        @csrf_exempt  # token-authenticated, no cookies: CSRF does not apply
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            if request.method not in methods:
                return error(405, f"use {' or '.join(methods)}", "method_not_allowed")
            header = request.headers.get("Authorization", "")
            agent = (
                agent_for_token(header.removeprefix("Bearer ").strip(), kind="api")
                if header.startswith("Bearer ")
                else None
            )
            if agent is None:
                return error(
                    401, "missing or invalid API token (see ~/.arena/config)", "unauthorized"
                )
            started, status = time.monotonic(), 500
            try:
                response = view(request, agent, *args, **kwargs)
                status = response.status_code
                return response
            finally:  # never raises: a failure to record is logged
                duration_ms = round((time.monotonic() - started) * 1000)
                api_call_record(
                    agent=agent,
                    request=request,
                    status=status,
                    duration_ms=duration_ms,
                    with_body=record_body,
                )

        return wrapper

    return decorate


def openapi(request: HttpRequest) -> JsonResponse:
    return JsonResponse(OPENAPI)


@agent_api("GET")
def budget(request: HttpRequest, agent: Agent) -> JsonResponse:
    return JsonResponse(agent_budget(agent))


@agent_api("GET", "POST")
def jobs(request: HttpRequest, agent: Agent) -> JsonResponse:
    account = agent.cluster_account
    if account is None:
        return error(409, "you have no cluster account", "not_provisioned")
    if request.method == "GET":
        cluster_sync(account_names=[account.name])
        return JsonResponse(
            {"jobs": [job_json(j) for j in account.jobs.order_by("-submitted_at")[:200]]}
        )
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    parsed = _job_request(body, Path(agent.sandbox))
    if isinstance(parsed, JsonResponse):
        return parsed
    try:
        job = job_submit(account=account, request=parsed)
    except SubmitRefused as refused:
        return error(
            400 if "budget" not in refused.message else 402,
            f"job refused: {refused.message}",
            "job_refused",
        )
    return JsonResponse(job_json(job), status=201)


@agent_api("GET")
def job_detail(request: HttpRequest, agent: Agent, job_id: str) -> JsonResponse:
    job = agent_job(agent, job_id)
    if job is None:
        return error(404, f"you have no job {job_id}", "not_found")
    cluster_sync(account_names=[job.account.name])
    job.refresh_from_db()
    return JsonResponse({**job_json(job), "output_tail": job_output(job, tail_bytes=16 * 1024)})


@agent_api("POST")
def job_cancel_view(request: HttpRequest, agent: Agent, job_id: str) -> JsonResponse:
    job = agent_job(agent, job_id)
    if job is None:
        return error(404, f"you have no job {job_id}", "not_found")
    # An on-demand evaluation's job is the platform's (it submitted it): the agent's user may
    # not cancel it, the evaluation's own route does (evalsuite/on_demand.py).
    run = job.eval_runs.filter(requested_by_agent=True).first()
    if run is not None:
        return error(
            409,
            f"job {job_id} runs your evaluation run {run.pk}: cancel that with "
            f"`arena-agent evals cancel {run.pk}` (POST /api/v1/evals/runs/{run.pk}/cancel)",
            "evaluation_job",
        )
    job_cancel(job=job)
    cluster_sync(account_names=[job.account.name])
    job.refresh_from_db()
    return JsonResponse(job_json(job))


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.scheduler_id,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "qos": job.qos,
        "nodes": job.nodes,
        "gpus": job.gpus,
        "time_limit_minutes": job.time_limit_minutes,
        "workdir": job.workdir,
        "stdout": job.stdout_path,
        "requeues": job.requeues,
        "gpu_hours_charged": round(job.gpu_seconds_charged / 3600, 4),
        "submitted_at": job.submitted_at.isoformat() if job.submitted_at else None,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "ended_at": job.ended_at.isoformat() if job.ended_at else None,
        "exit_code": job.exit_code,
    }


def _workdir(sandbox: Path, text: str) -> Path | JsonResponse:
    """The job's working directory below the sandbox, judged by its text (`..` lexically) and
    then reached without following a link: the platform (root) never resolves an agent's
    path, so a link loop or a link out of the sandbox is a clear refusal, not a 500. A folder
    not made yet is accepted, as before: the job itself (the agent's user) goes there."""
    try:
        where = locate(sandbox, text)
    except (UnsafePath, ValueError):
        shown = os.path.normpath(sandbox / text) if "\0" not in text else repr(text)
        return error(
            400, f"the working directory {shown} is outside your sandbox", "outside_sandbox"
        )
    try:
        info = where.stat()
    except FileNotFoundError:
        return where.path
    except (OSError, ValueError) as refused:  # UnsafePath: a link on the way; a NUL byte
        return error(400, f"the working directory cannot be used: {refused}", "bad_workdir")
    if not stat.S_ISDIR(info.st_mode):
        return error(
            400,
            f"the working directory {where} is {kind_of(info.st_mode)}, not a folder",
            "bad_workdir",
        )
    return where.path


def _job_request(body: Any, sandbox: Path) -> JobRequest | JsonResponse:
    if not isinstance(body, dict):
        return error(400, "the request body must be a JSON object", "bad_request")
    script = body.get("script")
    if not isinstance(script, str) or not script.strip():
        return error(400, "'script' (a bash script) is required", "bad_request")
    numbers = {}
    for field, default in (("nodes", 1), ("gpus_per_node", 1), ("time_limit_minutes", None)):
        value = body.get(field, default)
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < (0 if field == "gpus_per_node" else 1)
        ):
            return error(400, f"'{field}' must be a positive integer", "bad_request")
        numbers[field] = value
    workdir = _workdir(sandbox, str(body.get("workdir", ".")))
    if isinstance(workdir, JsonResponse):
        return workdir
    env = body.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        return error(400, "'env' must map names to strings", "bad_request")
    return JobRequest(
        name=str(body.get("name", "job")),
        script=script,
        nodes=numbers["nodes"],
        gpus_per_node=numbers["gpus_per_node"],
        time_limit_minutes=numbers["time_limit_minutes"],
        preemptible=bool(body.get("preemptible", False)),
        workdir=workdir,
        env=env,
    )


@agent_api("GET", "POST")
def data(request: HttpRequest, agent: Agent) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse({"data": [data_json(r) for r in agent.data_records.all()]})
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        record = data_register(
            agent=agent,
            path=str(body.get("path", "")),
            rows=_int(body, "rows"),
            tokens=_int(body, "tokens"),
            sources=body.get("sources") if isinstance(body.get("sources"), list) else [],
            licence=str(body.get("licence", "")),
            reason=str(body.get("reason", "")),
        )
    except RegistrationRefused as refused:
        return error(400, str(refused), "refused")
    return JsonResponse(data_json(record), status=201)


@agent_api("GET", "POST")
def checkpoints(request: HttpRequest, agent: Agent) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse({"checkpoints": [checkpoint_json(c) for c in agent.checkpoints.all()]})
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    ids = body.get("data_records", [])
    parent = body.get("parent")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        return error(400, "'data_records' must be a list of record ids", "bad_request")
    if parent is not None and not isinstance(parent, int):
        return error(400, "'parent' must be a checkpoint id", "bad_request")
    try:
        checkpoint = checkpoint_register(
            agent=agent, path=str(body.get("path", "")), job_id=str(body.get("job", "")),
            data_record_ids=ids, parent_id=parent,
        )  # fmt: skip
    except RegistrationRefused as refused:
        return error(400, str(refused), "refused")
    return JsonResponse(checkpoint_json(checkpoint), status=201)


def data_json(record: DataRecord) -> dict[str, Any]:
    return {
        "id": record.pk, "path": record.path, "sha256": record.sha256, "rows": record.rows,
        "tokens": record.tokens, "sources": record.sources, "licence": record.licence,
        "reason": record.reason, "created_at": record.created_at.isoformat(),
    }  # fmt: skip


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "id": checkpoint.pk, "path": checkpoint.path, "job": checkpoint.job.scheduler_id,
        "parent": checkpoint.parent_id, "data_records": sorted(r.pk for r in checkpoint.data_records.all()),
        "architecture": checkpoint.architecture, "parameters": checkpoint.parameters,
        "end_of_turn_token": checkpoint.end_of_turn_token, "weights_sha256": checkpoint.weights_sha256,
        "created_at": checkpoint.created_at.isoformat(),
    }  # fmt: skip


def json_body(request: HttpRequest) -> dict[str, Any] | JsonResponse:
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "the request body is not valid JSON", "bad_json")
    return (
        body
        if isinstance(body, dict)
        else error(400, "the request body must be a JSON object", "bad_request")
    )


def _int(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RegistrationRefused(f"'{field}' must be a whole number")
    return value


@agent_api("GET", "POST")
def nomination(request: HttpRequest, agent: Agent) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse(
            {"nominations": [nomination_json(n) for n in agent.nominations.select_related("phase")]}
        )
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    checkpoint = body.get("checkpoint")
    if not isinstance(checkpoint, int) or not isinstance(body.get("model_card"), str):
        return error(
            400, "'checkpoint' (an id) and 'model_card' (text) are required", "bad_request"
        )
    try:
        chosen = nomination_set(
            agent=agent, checkpoint_id=checkpoint, model_card=body["model_card"]
        )
    except RegistrationRefused as refused:
        return error(409 if "closed" in str(refused) else 400, str(refused), "refused")
    return JsonResponse(nomination_json(chosen))


def nomination_json(chosen: Nomination) -> dict[str, Any]:
    return {
        "phase": chosen.phase.label,
        "checkpoint": chosen.checkpoint_id,
        "model_card": chosen.card_fields,
        "updated_at": chosen.updated_at.isoformat(),
    }


@agent_api("GET", "POST")
def journal(request: HttpRequest, agent: Agent) -> JsonResponse:
    """Append-only: there is no route that changes or deletes an entry (agents/journal.py)."""
    if request.method == "GET":
        limit = request.GET.get("limit", "")
        if limit and not (limit.isascii() and limit.isdigit() and len(limit) <= 6):
            return error(400, "'limit' must be a whole number", "bad_request")
        return JsonResponse(
            {"entries": [journal_json(e) for e in journal_entries(agent, limit=int(limit or 100))]}
        )
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    text, kind = body.get("text"), body.get("kind", JournalEntry.Kind.NOTE)
    if not isinstance(text, str) or not isinstance(kind, str):
        return error(400, "'text' (the entry) and 'kind' must be strings", "bad_request")
    try:
        entry = journal_add(agent=agent, text=text, kind=kind)
    except JournalRefused as refused:
        return error(refused.status, str(refused), "refused" if refused.status == 400 else "limit")
    return JsonResponse(journal_json(entry), status=201)


def journal_json(entry: JournalEntry) -> dict[str, Any]:
    return {
        "id": entry.pk, "kind": entry.kind, "text": entry.text,
        "phase": entry.phase.label if entry.phase else None, "created_at": entry.created_at.isoformat(),
    }  # fmt: skip


@agent_api("POST", record_body=False)
def trajectory_events(request: HttpRequest, agent: Agent) -> JsonResponse:
    """Append a tool call the agent's harness reports. Append only: no route reads it back."""
    body = json_body(request)
    if isinstance(body, JsonResponse):
        return body
    try:
        event = tool_call_record(agent=agent, report=body)
    except ToolCallRefused as refused:
        return error(400, str(refused), "bad_request")
    except TrajectoryDayFull as full:
        return error(429, f"{full}: try again tomorrow (UTC)", "trajectory_full")
    return JsonResponse({"id": event.pk, "recorded_at": event.created_at.isoformat()}, status=201)
