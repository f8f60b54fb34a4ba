"""The generated OpenAPI document is the agent API's contract: every route in it is called
here as an agent calls it (a real token, Django's test client, the local cluster), on its
success and its main refusals, and every JSON reply is validated against the schema the
document declares for that route and status. A reply whose status the document does not
declare fails, and so does a route of the document that no call reached."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import jsonschema
import pytest
from django.test import Client
from django.utils import timezone

from agents import journal
from agents.models import Agent
from agents.services import token_issue
from arena.competition.models import Phase
from arena.phases.models import FeedbackBundle
from cluster.backends import cluster_backend
from cluster.backends.base import AccountLimits
from cluster.models import ClusterAccount, Job
from tests import factories
from tests.evalsuite.on_demand_builders import checkpoint_of, gpu_held, provisioned

pytestmark = pytest.mark.django_db


class SchemaCalls:
    """Calls the API and checks each reply against the document; remembers what it reached."""

    def __init__(self, document: dict[str, Any], token: str) -> None:
        self.document = document
        self.client = Client(headers={"Authorization": f"Bearer {token}"})
        self.reached: dict[tuple[str, str], set[int]] = {}

    def __call__(
        self,
        method: str,
        route: str,
        *,
        path: dict[str, object] | None = None,
        body: object = None,
        raw: bytes | None = None,
        query: str = "",
        client: Client | None = None,
    ) -> tuple[int, Any]:
        url = route.format(**(path or {})) + (f"?{query}" if query else "")
        content = raw if raw is not None else json.dumps(body if body is not None else {})
        reply = (client or self.client).generic(
            method, url, content if method == "POST" else "", content_type="application/json"
        )
        assert reply["Content-Type"].startswith("application/json"), (method, url, reply)
        answer = json.loads(reply.content)
        item = self.document["paths"][route]
        operation = item.get(method.lower())
        if operation is None:  # a method the route lacks: its 405, declared by its methods
            assert reply.status_code == 405, (method, url, reply.status_code)
            operation = next(iter(item.values()))
        declared = operation["responses"].get(str(reply.status_code))
        assert declared is not None, (
            f"{method} {route} answered {reply.status_code}, which the schema does not declare: "
            f"{reply.content[:300]!r}"
        )
        schema = declared["content"]["application/json"]["schema"]
        jsonschema.Draft202012Validator(
            {**schema, "components": self.document["components"]}
        ).validate(answer)
        if method.lower() in item:
            self.reached.setdefault((route, method), set()).add(reply.status_code)
        return reply.status_code, answer


@pytest.fixture
def document() -> dict[str, Any]:
    reply = Client().get("/api/v1/openapi.json")
    assert reply.status_code == 200
    document = reply.json()
    assert document["openapi"].startswith("3.1")
    return document


@pytest.fixture
def ann(tmp_path) -> Agent:
    """An agent with a sandbox and a cluster account whose jobs the local cluster runs (as
    root, the user these tests run as)."""
    agent, account = provisioned("schema_ann", tmp_path)
    ClusterAccount.objects.filter(pk=account.pk).update(unix_user="root")
    cluster_backend().account_apply(
        account=account.name, unix_user="root", limits=AccountLimits(10, 8, 8, 24)
    )
    return agent


def test_every_route_answers_as_the_generated_schema_says(document, ann, tmp_path, settings):
    call = SchemaCalls(document, token_issue(agent=ann, kind="api"))
    phase = factories.running_phase()
    sandbox = tmp_path / "schema_ann"

    # Any route: no token, a wrong method, a body that is not JSON or does not validate.
    assert call("GET", "/api/v1/budget", client=Client())[0] == 401
    assert call("POST", "/api/v1/budget")[0] == 405
    assert call("GET", "/api/v1/budget")[0] == 200

    # Jobs: one submitted and run by the local cluster, and the refusals.
    assert call("GET", "/api/v1/jobs") == (200, {"jobs": []})
    job = {"script": "echo hi", "time_limit_minutes": 1, "gpus_per_node": 0}
    status, submitted = call("POST", "/api/v1/jobs", body=job)
    assert status == 201, submitted
    assert call("POST", "/api/v1/jobs", raw=b"{not json")[1]["error"]["code"] == "bad_json"
    assert call("POST", "/api/v1/jobs", raw=b"[1]")[1]["error"]["code"] == "bad_request"
    status, invalid = call("POST", "/api/v1/jobs", body={**job, "nodes": 0})
    assert status == 400 and invalid["error"]["message"] == "'nodes' must be a positive integer"
    status, invalid = call("POST", "/api/v1/jobs", body={"script": "true"})
    assert status == 400 and "'time_limit_minutes'" in invalid["error"]["message"]
    outside = call("POST", "/api/v1/jobs", body={**job, "workdir": "../../etc"})
    assert outside[0] == 400 and outside[1]["error"]["code"] == "outside_sandbox"
    too_big = {**job, "gpus_per_node": 8, "time_limit_minutes": 24 * 60}
    over = call("POST", "/api/v1/jobs", body=too_big)
    assert over[0] == 402 and over[1]["error"]["code"] == "job_refused"
    assert call("GET", "/api/v1/jobs")[0] == 200
    job_path = {"job_id": submitted["id"]}
    assert call("GET", "/api/v1/jobs/{job_id}", path=job_path)[0] == 200
    assert call("GET", "/api/v1/jobs/{job_id}", path={"job_id": "999999"})[0] == 404
    assert call("POST", "/api/v1/jobs/{job_id}/cancel", path=job_path)[0] == 200
    assert call("POST", "/api/v1/jobs/{job_id}/cancel", path={"job_id": "999999"})[0] == 404

    # Data and checkpoints.
    (sandbox / "train.jsonl").write_text('{"text": "hi"}\n')
    record = {"path": "train.jsonl", "rows": 1, "tokens": 2, "sources": ["made up"],
              "licence": "CC0", "reason": "a test"}  # fmt: skip
    assert call("POST", "/api/v1/data", body=record)[0] == 201
    refused = call("POST", "/api/v1/data", body={**record, "licence": ""})
    assert refused[0] == 400 and refused[1]["error"]["code"] == "refused"
    assert len(call("GET", "/api/v1/data")[1]["data"]) == 1
    checkpoint = checkpoint_of(ann, ClusterAccount.objects.get(name=ann.cluster_account))
    assert [c["id"] for c in call("GET", "/api/v1/checkpoints")[1]["checkpoints"]] == [
        checkpoint.pk
    ]
    # (A checkpoint the platform accepts needs real weights and a tokenizer: its 201 is the
    # slow test_registration.py's; here its refusal.)
    not_ours = call("POST", "/api/v1/checkpoints", body={"path": "ckpt", "job": "999999"})
    assert not_ours[0] == 400 and not_ours[1]["error"]["message"].endswith("ckpt does not exist")

    # Nomination: made while the phase runs, refused once it has closed.
    card = {"checkpoint": checkpoint.pk, "model_card": factories.MODEL_CARD}
    assert call("POST", "/api/v1/nomination", body=card)[0] == 200
    assert call("POST", "/api/v1/nomination", body={"checkpoint": "1"})[0] == 400
    assert len(call("GET", "/api/v1/nomination")[1]["nominations"]) == 1
    Phase.objects.filter(pk=phase.pk).update(ends_at=timezone.now() - dt.timedelta(seconds=1))
    assert call("POST", "/api/v1/nomination", body=card)[0] == 409
    Phase.objects.filter(pk=phase.pk).update(ends_at=timezone.now() + dt.timedelta(days=1))

    # Journal and trajectory, with their limits.
    assert call("POST", "/api/v1/journal", body={"text": "H1", "kind": "hypothesis"})[0] == 201
    assert call("POST", "/api/v1/journal", body={"text": 42})[0] == 400
    assert call("GET", "/api/v1/journal", query="limit=5")[0] == 200
    assert call("GET", "/api/v1/journal", query="limit=ten")[0] == 400
    # Room for one more tool call (and the record of the call that reports it) today.
    settings.AGENTS_TRAJECTORY_REPORTED_DAY_EVENTS = 2
    assert call("POST", "/api/v1/trajectory/events", body={"command": "ls"})[0] == 201
    assert call("POST", "/api/v1/trajectory/events", body={"command": ""})[0] == 400
    full = call("POST", "/api/v1/trajectory/events", body={"command": "ls"})
    assert full[0] == 429 and full[1]["error"]["code"] == "trajectory_full"
    settings.AGENTS_TRAJECTORY_REPORTED_DAY_EVENTS = 10_000
    monkey_limit, journal.MAX_ENTRIES_PER_HOUR = journal.MAX_ENTRIES_PER_HOUR, 1
    try:
        assert call("POST", "/api/v1/journal", body={"text": "one more"})[0] == 429
    finally:
        journal.MAX_ENTRIES_PER_HOUR = monkey_limit

    # Feedback: none yet, then the phase's votes and leaderboard.
    assert call("GET", "/api/v1/votes")[0] == 403
    assert call("GET", "/api/v1/leaderboard", query="category=poetry")[0] == 400
    assert call("GET", "/api/v1/leaderboard")[0] == 403
    FeedbackBundle.objects.create(
        phase=phase, source_phase=phase, agent=ann, battles=0, folder=str(sandbox)
    )
    assert call("GET", "/api/v1/votes", query="phase=phase-1")[1]["battles"] == []
    assert call("GET", "/api/v1/leaderboard")[1]["error"]["code"] == "no_votes"
    factories.rating_snapshot("phase-1", {"model-a": 1000.0, "model-b": 990.0})
    status, board = call("GET", "/api/v1/leaderboard")
    assert status == 200 and board["own_model"] is None and board["n_battles"] == 100
    assert call("GET", "/api/v1/leaderboard", query="category=coding")[0] == 404

    # Evaluations: the results, and a run on demand queued (the GPU it needs held by another
    # job, so that it waits), shown and cancelled.
    assert call("GET", "/api/v1/evals")[0] == 200
    backend = cluster_backend()
    holder = gpu_held(ClusterAccount.objects.get(name=ann.cluster_account), backend, tmp_path)
    try:
        evaluations_asked(call, checkpoint.pk)
    finally:
        backend.cancel(scheduler_id=holder.scheduler_id, unix_user="")

    operations = {
        (route, method.upper()) for route, item in document["paths"].items() for method in item
    }
    assert set(call.reached) == operations, operations ^ set(call.reached)
    without_success = [op for op, statuses in call.reached.items()
                       if not any(200 <= s < 300 for s in statuses)]  # fmt: skip
    assert without_success == [("/api/v1/checkpoints", "POST")]


def evaluations_asked(call: SchemaCalls, checkpoint_id: int) -> None:
    run_body = {"checkpoint": checkpoint_id, "benchmarks": ["gsm8k"]}
    status, run = call("POST", "/api/v1/evals/runs", body=run_body)
    assert status == 201, run
    assert call("POST", "/api/v1/evals/runs", body={**run_body, "benchmarks": ["nope"]})[0] == 400
    assert call("POST", "/api/v1/evals/runs", body={"checkpoint": 999_999})[0] == 404
    assert [r["id"] for r in call("GET", "/api/v1/evals/runs")[1]["runs"]] == [run["id"]]
    run_path = {"run_id": run["id"]}
    assert call("GET", "/api/v1/evals/runs/{run_id}", path=run_path)[0] == 200
    assert call("GET", "/api/v1/evals/runs/{run_id}", path={"run_id": "x"})[0] == 404
    evaluation_job = Job.objects.get(eval_runs__pk=run["id"])
    refused = call("POST", "/api/v1/jobs/{job_id}/cancel",
                   path={"job_id": evaluation_job.scheduler_id})  # fmt: skip
    assert refused[0] == 409 and refused[1]["error"]["code"] == "evaluation_job"
    assert call("POST", "/api/v1/evals/runs/{run_id}/cancel", path=run_path)[0] == 200
    assert call("POST", "/api/v1/evals/runs/{run_id}/cancel", path=run_path)[0] == 409
    assert call("POST", "/api/v1/evals/runs/{run_id}/cancel", path={"run_id": "7x"})[0] == 404


def test_every_status_the_api_gives_a_refusal_is_declared_by_some_route(document):
    """The one table of statuses (arena/api_v1.py) names no status the document never
    declares for any route: a refusal the schema cannot describe would be a silent break."""
    from arena.api_v1 import STATUS_OF_REASON, STATUSES

    declared = {
        int(status)
        for item in document["paths"].values()
        for operation in item.values()
        for status in operation["responses"]
    }
    assert set(STATUSES.values()) | set(STATUS_OF_REASON.values()) <= declared
    envelope = document["components"]["schemas"]["ErrorEnvelope"]
    assert envelope["required"] == ["error"]
