"""The agent API's own routes (`/api/v1/budget`, `jobs`, `data`, `checkpoints`, `nomination`,
`journal`, `trajectory/events`) and its token auth. Thin: each endpoint takes a typed body,
calls one service and returns a typed reply; a refusal is an exception with a code, which
arena/api_v1.py answers with its status in the error envelope."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.security import HttpBearer
from pydantic import BaseModel, ConfigDict

from agents import journal as journal_limits
from agents.journal import journal_add, journal_entries
from agents.models import Agent, Checkpoint, DataRecord, JournalEntry, Nomination
from agents.rate_limit import interval_claim
from agents.selectors import agent_budget, agent_for_token, agent_job
from agents.services import checkpoint_register, data_register, nomination_set
from agents.trajectory import tool_call_record
from arena.json_api import ApiError, replies, said
from cluster.backends.base import JobRequest
from cluster.models import ClusterAccount, Job
from cluster.sandbox_files import UnsafePath, kind_of, locate
from cluster.selectors import job_output
from cluster.services import cluster_sync, job_cancel, job_submit

router = Router(tags=["agent"])

# The routes whose body is recorded as an event of its own, not in the call's record.
BODY_NOT_RECORDED = {"api-trajectory-events"}


class AgentToken(HttpBearer):
    """`Authorization: Bearer arena_api_…`: the agent whose API token it is."""

    def __call__(self, request: HttpRequest) -> Agent | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return None
        return self.authenticate(request, header.removeprefix("Bearer ").strip())

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        return agent_for_token(token, kind="api")


def caller(request: HttpRequest) -> Agent:
    agent: Agent = request.auth  # set by AgentToken
    return agent


class Body(Schema):
    """A request body: JSON types as they are (no "1" for 1, no true for 1); unknown fields
    are ignored."""

    model_config = ConfigDict(strict=True)


class Reply(BaseModel):
    """A reply whose fields beyond those named are passed on as they are."""

    model_config = ConfigDict(extra="allow")


# --- budget -----------------------------------------------------------------------------------


class Usage(Reply):
    used: float
    limit: float
    left: float


class Credit(Reply):
    spent: float
    in_flight: float
    limit: float
    left: float


class Budget(Reply):
    agent: str
    period: str | None = None
    gpu_hours: Usage
    gpus_running: dict[str, int]
    max_job_hours: int | None = None
    storage: dict[str, Any]
    api_credit_usd: Credit
    scaffold_credit_usd: Credit | None = Field(
        None,
        description="the agent's harness's own model calls, billed apart from the API credit "
        "under a budget the organizers set (read only)",
    )
    submissions_blocked: str | None = None


@router.get(
    "/budget",
    response=replies({200: Budget}, 409),
    exclude_unset=True,
    operation_id="budget",
    url_name="api-budget",
    summary="your GPU-hours, GPUs running, storage and API credit",
)
def budget(request: HttpRequest) -> dict[str, Any]:
    _own_account(caller(request))  # a judge's agent row has none: 409, not a 500
    return agent_budget(caller(request))


# --- jobs -------------------------------------------------------------------------------------


class JobOut(Schema):
    id: str
    name: str
    state: str
    reason: str = Field(description="why it waits, in words")
    qos: str
    nodes: int
    gpus: int
    time_limit_minutes: int
    workdir: str
    stdout: str
    requeues: int
    gpu_hours_charged: float
    submitted_at: str | None
    started_at: str | None
    ended_at: str | None
    exit_code: str


class JobDetail(JobOut):
    output_tail: str = Field(description="the last 16 KiB of its output")


class JobList(Schema):
    jobs: list[JobOut]


class JobSubmission(Body):
    name: str = "job"
    script: Annotated[
        str, Field(min_length=1, pattern=r"\S", description="a bash script; #SBATCH lines are overridden"),
        said("'script' (a bash script) is required"),
    ]  # fmt: skip
    nodes: Annotated[int, Field(ge=1), said("'nodes' must be a positive integer")] = 1
    gpus_per_node: Annotated[
        int, Field(ge=0), said("'gpus_per_node' must be a positive integer")
    ] = 1
    time_limit_minutes: Annotated[
        int, Field(ge=1), said("'time_limit_minutes' must be a positive integer")
    ]
    preemptible: bool = False
    workdir: str = Field(".", description="relative to the sandbox")
    env: Annotated[dict[str, str], said("'env' must map names to strings")] = {}


@router.get(
    "/jobs",
    response=replies({200: JobList}, 409),
    operation_id="jobs_list",
    url_name="api-jobs",
    summary="your jobs, newest first (at most 200)",
)
def jobs_list(request: HttpRequest) -> dict[str, Any]:
    account = _own_account(caller(request))
    _jobs_refresh(account)
    return {"jobs": [job_json(j) for j in account.jobs.order_by("-submitted_at")[:200]]}


@router.post(
    "/jobs",
    response=replies({201: JobOut}, 402, 409),
    operation_id="jobs_submit",
    url_name="api-jobs",
    summary="submit a batch job under your account",
)
def jobs_submit(request: HttpRequest, submission: JobSubmission) -> Status[dict[str, Any]]:
    agent = caller(request)
    account = _own_account(agent)
    parsed = JobRequest(
        name=submission.name,
        script=submission.script,
        nodes=submission.nodes,
        gpus_per_node=submission.gpus_per_node,
        time_limit_minutes=submission.time_limit_minutes,
        preemptible=submission.preemptible,
        workdir=_workdir(Path(agent.sandbox), submission.workdir),
        env=submission.env,
    )
    return Status(201, job_json(job_submit(account=account, request=parsed)))


@router.get(
    "/jobs/{job_id}",
    response=replies({200: JobDetail}, 404),
    operation_id="jobs_show",
    url_name="api-job",
    summary="one of your jobs, with the tail of its output",
)
def jobs_show(request: HttpRequest, job_id: str) -> dict[str, Any]:
    agent = caller(request)
    job = _own_job(agent, job_id)
    _jobs_refresh(job.account)
    job.refresh_from_db()
    return {**job_json(job), "output_tail": job_output(job, tail_bytes=16 * 1024)}


@router.post(
    "/jobs/{job_id}/cancel",
    response=replies({200: JobOut}, 404, 409),
    operation_id="jobs_cancel",
    url_name="api-job-cancel",
    summary="cancel one of your jobs",
)
def jobs_cancel(request: HttpRequest, job_id: str) -> dict[str, Any]:
    agent = caller(request)
    job = _own_job(agent, job_id)
    # An on-demand evaluation's job is the platform's (it submitted it): the agent's user may
    # not cancel it, the evaluation's own route does (evalsuite/on_demand.py).
    run = job.eval_runs.filter(requested_by_agent=True).first()
    if run is not None:
        raise ApiError(
            "evaluation_job",
            f"job {job_id} runs your evaluation run {run.pk}: cancel that with "
            f"`arena-agent evals cancel {run.pk}` (POST /api/v1/evals/runs/{run.pk}/cancel)",
        )
    job_cancel(job=job)
    cluster_sync(account_names=[job.account.name])
    job.refresh_from_db()
    return job_json(job)


def _jobs_refresh(account: ClusterAccount) -> None:
    """The account's jobs from the scheduler's accounting, at most once per
    `AGENTS_JOBS_SYNC_INTERVAL_S` however often the agent asks: each sync runs `sacct` on the
    controller every job shares (the platform's own sync keeps the rows current meanwhile).
    A cancel syncs at once: it changed the job."""
    key = f"jobs-sync:{account.pk}:{account.created_at.timestamp()}"
    if interval_claim(key, seconds=settings.AGENTS_JOBS_SYNC_INTERVAL_S):
        cluster_sync(account_names=[account.name])


def _own_account(agent: Agent) -> ClusterAccount:
    if agent.cluster_account is None:
        raise ApiError("not_provisioned", "you have no cluster account")
    return agent.cluster_account


def _own_job(agent: Agent, job_id: str) -> Job:
    job = agent_job(agent, job_id)
    if job is None:
        raise ApiError("not_found", f"you have no job {job_id}")
    return job


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


def _workdir(sandbox: Path, text: str) -> Path:
    """The job's working directory below the sandbox, judged by its text (`..` lexically) and
    then reached without following a link: the platform (root) never resolves an agent's
    path, so a link loop or a link out of the sandbox is a clear refusal, not a 500. A folder
    not made yet is accepted, as before: the job itself (the agent's user) goes there."""
    try:
        where = locate(sandbox, text)
    except (UnsafePath, ValueError):
        shown = os.path.normpath(sandbox / text) if "\0" not in text else repr(text)
        raise ApiError(
            "outside_sandbox", f"the working directory {shown} is outside your sandbox"
        ) from None
    try:
        info = where.stat()
    except FileNotFoundError:
        return where.path
    except (OSError, ValueError) as refused:  # UnsafePath: a link on the way; a NUL byte
        raise ApiError("bad_workdir", f"the working directory cannot be used: {refused}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ApiError(
            "bad_workdir",
            f"the working directory {where} is {kind_of(info.st_mode)}, not a folder",
        )
    return where.path


# --- data and checkpoints ---------------------------------------------------------------------


class DataRecordOut(Schema):
    id: int
    path: str
    sha256: str
    rows: int
    tokens: int
    sources: list[Any]
    licence: str
    reason: str
    created_at: str


class DataList(Schema):
    data: list[DataRecordOut]


class DataRegistration(Body):
    path: str = Field("", description="a file or folder in your sandbox")
    rows: Annotated[int, said("'rows' must be a whole number")]
    tokens: Annotated[int, said("'tokens' must be a whole number")]
    sources: list[str] = Field([], description="data set ids or URLs")
    licence: str = ""
    reason: str = ""


@router.get(
    "/data",
    response=replies({200: DataList}),
    operation_id="data_list",
    url_name="api-data",
    summary="your data records",
)
def data_list(request: HttpRequest) -> dict[str, Any]:
    return {"data": [data_json(r) for r in caller(request).data_records.all()]}


@router.post(
    "/data",
    response=replies({201: DataRecordOut}),
    operation_id="data_register",
    url_name="api-data",
    summary="record a data file or folder in your sandbox: "
    "sha256, rows, tokens, sources, licence, reason",
)
def data_register_view(
    request: HttpRequest, registration: DataRegistration
) -> Status[dict[str, Any]]:
    record = data_register(agent=caller(request), **registration.model_dump())
    return Status(201, data_json(record))


class CheckpointOut(Schema):
    id: int
    path: str
    job: str
    parent: int | None
    data_records: list[int]
    architecture: str
    parameters: int | None
    end_of_turn_token: str
    weights_sha256: str
    created_at: str


class CheckpointList(Schema):
    checkpoints: list[CheckpointOut]


class CheckpointRegistration(Body):
    path: str = ""
    job: str = Field("", description="the id of the completed job of yours that wrote it")
    data_records: Annotated[list[int], said("'data_records' must be a list of record ids")] = []
    parent: Annotated[int | None, said("'parent' must be a checkpoint id")] = None


@router.get(
    "/checkpoints",
    response=replies({200: CheckpointList}),
    operation_id="checkpoints_list",
    url_name="api-checkpoints",
    summary="your checkpoints, with lineage",
)
def checkpoints_list(request: HttpRequest) -> dict[str, Any]:
    return {"checkpoints": [checkpoint_json(c) for c in caller(request).checkpoints.all()]}


@router.post(
    "/checkpoints",
    response=replies({201: CheckpointOut}),
    operation_id="checkpoints_register",
    url_name="api-checkpoints",
    summary="validate and record a checkpoint made by one of your completed jobs",
)
def checkpoints_register(
    request: HttpRequest, registration: CheckpointRegistration
) -> Status[dict[str, Any]]:
    checkpoint = checkpoint_register(
        agent=caller(request), path=registration.path, job_id=registration.job,
        data_record_ids=registration.data_records, parent_id=registration.parent,
    )  # fmt: skip
    return Status(201, checkpoint_json(checkpoint))


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


# --- nomination -------------------------------------------------------------------------------


class NominationOut(Schema):
    phase: str
    checkpoint: int
    model_card: dict[str, Any]
    updated_at: str


class NominationList(Schema):
    nominations: list[NominationOut]


NOMINATION_FIELDS = "'checkpoint' (an id) and 'model_card' (text) are required"


class NominationChoice(Body):
    checkpoint: Annotated[int, said(NOMINATION_FIELDS)]
    model_card: Annotated[
        str,
        Field(description="Markdown with YAML front matter: training_method, steps, gpu_hours, "
              "hardware, datasets"),
        said(NOMINATION_FIELDS),
    ]  # fmt: skip


@router.get(
    "/nomination",
    response=replies({200: NominationList}),
    operation_id="nominations_list",
    url_name="api-nomination",
    summary="your nominations, per phase",
)
def nominations_list(request: HttpRequest) -> dict[str, Any]:
    chosen = caller(request).nominations.select_related("phase")
    return {"nominations": [nomination_json(n) for n in chosen]}


@router.post(
    "/nomination",
    response=replies({200: NominationOut}, 409),
    operation_id="nominate",
    url_name="api-nomination",
    summary="nominate a checkpoint for the current phase (changeable until it freezes)",
)
def nominate(request: HttpRequest, choice: NominationChoice) -> dict[str, Any]:
    chosen = nomination_set(
        agent=caller(request), checkpoint_id=choice.checkpoint, model_card=choice.model_card
    )
    return nomination_json(chosen)


def nomination_json(chosen: Nomination) -> dict[str, Any]:
    return {
        "phase": chosen.phase.label,
        "checkpoint": chosen.checkpoint_id,
        "model_card": chosen.card_fields,
        "updated_at": chosen.updated_at.isoformat(),
    }


# --- journal ----------------------------------------------------------------------------------


class JournalEntryOut(Schema):
    id: int
    kind: str
    text: str
    phase: str | None
    created_at: str


class JournalList(Schema):
    entries: list[JournalEntryOut]


class JournalQuery(Schema):
    limit: Annotated[
        str,
        Field(pattern=r"^[0-9]{1,6}$", description="how many of the latest entries (default "
              f"{journal_limits.LIST_DEFAULT}, at most {journal_limits.LIST_MAX})"),
        said("'limit' must be a whole number"),
    ] = str(journal_limits.LIST_DEFAULT)  # fmt: skip


JOURNAL_FIELDS = "'text' (the entry) and 'kind' must be strings"


class JournalAddition(Body):
    text: Annotated[
        str,
        Field(description=f"at most {journal_limits.MAX_TEXT_CHARS:,} characters"),
        said(JOURNAL_FIELDS),
    ]
    kind: Annotated[
        str,
        Field(description=f"one of {', '.join(JournalEntry.Kind.values)}"),
        said(JOURNAL_FIELDS),
    ] = "note"


@router.get(
    "/journal",
    response=replies({200: JournalList}),
    operation_id="journal_list",
    url_name="api-journal",
    summary="your own experiment journal, the latest entries oldest first",
)
def journal_list(request: HttpRequest, query: Query[JournalQuery]) -> dict[str, Any]:
    entries = journal_entries(caller(request), limit=int(query.limit))
    return {"entries": [journal_json(e) for e in entries]}


@router.post(
    "/journal",
    response=replies({201: JournalEntryOut}, 429),
    operation_id="journal_add",
    url_name="api-journal",
    summary="add an entry (a hypothesis, a result, a decision, "
    "a note); append-only: no route changes or deletes one",
)
def journal_add_view(request: HttpRequest, addition: JournalAddition) -> Status[dict[str, Any]]:
    entry = journal_add(agent=caller(request), text=addition.text, kind=addition.kind)
    return Status(201, journal_json(entry))


def journal_json(entry: JournalEntry) -> dict[str, Any]:
    return {
        "id": entry.pk, "kind": entry.kind, "text": entry.text,
        "phase": entry.phase.label if entry.phase else None, "created_at": entry.created_at.isoformat(),
    }  # fmt: skip


# --- trajectory -------------------------------------------------------------------------------


TEXT_FIELDS = "'output' and 'tool' must be text"


class ToolCallReport(Body):
    command: Annotated[
        str,
        Field(min_length=1, description="the command or tool input"),
        said("'command' (the command or tool input, as text) is required"),
    ]
    output: Annotated[str, said(TEXT_FIELDS)] = ""
    exit_code: Annotated[int | None, said("'exit_code' must be an integer or null")] = None
    duration_s: Annotated[
        float | None, Field(ge=0), said("'duration_s' must be a number of seconds or null")
    ] = None
    tool: Annotated[str, Field(description="the tool's name"), said(TEXT_FIELDS)] = "shell"


class TrajectoryReceipt(Schema):
    id: int
    recorded_at: str


@router.post(
    "/trajectory/events",
    response=replies({201: TrajectoryReceipt}, 429),
    operation_id="trajectory_append",
    url_name="api-trajectory-events",
    summary="append a tool call your harness made (append only: no route reads it back)",
)
def trajectory_append(request: HttpRequest, report: ToolCallReport) -> Status[dict[str, Any]]:
    event = tool_call_record(agent=caller(request), report=report.model_dump())
    return Status(201, {"id": event.pk, "recorded_at": event.created_at.isoformat()})
