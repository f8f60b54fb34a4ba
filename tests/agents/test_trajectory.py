"""The trajectory the platform records for each agent: its API calls (without its token), the
tool calls its harness reports, its model calls through the proxy; bounded, append-only in
PostgreSQL, and unreadable through any route an agent's token opens."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx2
import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agents import trajectory
from agents.models import Agent, TrajectoryDay, TrajectoryEvent, Upstream
from agents.services import agent_create, token_issue
from agents.trajectory import MAX_EVENT_BYTES, REPLY_CHARS, ReplyCollector, model_call_record
from tests.factories import agent_with_gpu_hours, running_phase
from tests.support.scripted_llm import Script

SECRET_STEP = "cat /organizers/heldout_answers.jsonl"


@pytest.fixture
def ann(db) -> Agent:
    return agent_create(name="ann", credit_limit=Decimal("10"))


def api(token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token}"})


def events(agent: Agent, kind: str) -> list[TrajectoryEvent]:
    return list(TrajectoryEvent.objects.filter(agent=agent, kind=kind).order_by("id"))


def report_tool_call(client: Client, **report: object):
    return client.post("/api/v1/trajectory/events", report, content_type="application/json")


def test_an_api_call_is_recorded_with_a_redacted_body_and_never_the_token(ann):
    token = token_issue(agent=ann, kind="api")
    client = api(token)
    body = {"path": "data/train.jsonl", "hf_token": "hf_abc", "reason": f"mine: {token}"}

    refused = client.post("/api/v1/data", body, content_type="application/json")
    listed = client.get("/api/v1/checkpoints?page=2")

    assert refused.status_code == 400 and listed.status_code == 200
    posted, got = events(ann, "api_call")
    assert (posted.payload["method"], posted.payload["path"]) == ("POST", "/api/v1/data")
    assert posted.payload["status"] == 400 and posted.reported is False
    assert posted.payload["body"] == {
        "path": "data/train.jsonl",
        "hf_token": "[redacted]",
        "reason": "mine: [redacted]",
    }
    assert got.payload["query"] == {"page": ["2"]} and got.payload["status"] == 200
    recorded = json.dumps([posted.payload, got.payload])
    assert token not in recorded and token.split("_")[-1] not in recorded


def test_a_call_without_a_valid_token_is_not_recorded(ann):
    assert api("arena_api_wrong").get("/api/v1/checkpoints").status_code == 401
    assert not TrajectoryEvent.objects.exists()


def test_a_harness_appends_tool_calls_marked_as_reported(ann):
    client = api(token_issue(agent=ann, kind="api"))

    answer = report_tool_call(
        client, command="python train.py", output="loss 1.2\n", exit_code=0, duration_s=3.5
    )

    assert answer.status_code == 201
    (tool,) = events(ann, "tool_call")
    assert answer.json()["id"] == tool.pk and tool.reported is True
    assert tool.payload == {
        "tool": "shell",
        "command": "python train.py",
        "output": "loss 1.2\n",
        "exit_code": 0,
        "duration_s": 3.5,
    }
    (call,) = events(ann, "api_call")  # the POST itself, its body not recorded twice
    assert call.payload["body"] == "[recorded as its own event]" and call.pk > tool.pk


def test_the_harness_route_appends_only_and_refuses_malformed_reports(ann):
    client = api(token_issue(agent=ann, kind="api"))
    assert client.get("/api/v1/trajectory/events").status_code == 405
    refused = report_tool_call(client, command="ls", exit_code="zero")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "'exit_code' must be an integer or null"
    assert report_tool_call(client, output="no command").status_code == 400
    assert not events(ann, "tool_call")


def test_a_long_output_is_cut_head_and_tail_and_says_so(ann):
    client = api(token_issue(agent=ann, kind="api"))
    output = "start\n" + "x" * 200_000 + "\nTraceback: the end"

    assert report_tool_call(client, command="make", output=output, exit_code=2).status_code == 201

    (tool,) = events(ann, "tool_call")
    assert tool.payload["output"].startswith("start\n")
    assert tool.payload["output"].endswith("Traceback: the end")
    assert "chars cut]" in tool.payload["output"]
    assert tool.size <= MAX_EVENT_BYTES


def test_output_with_a_nul_and_a_lone_surrogate_is_stored(ann):
    client = api(token_issue(agent=ann, kind="api"))
    body = '{"command": "cat blob", "output": "a\\u0000b\\ud800c"}'
    data = '{"\\u0000path": "x\\u0000"}'  # in a key too, where an API call's body records it

    answer = client.post("/api/v1/trajectory/events", body, content_type="application/json")
    client.post("/api/v1/data", data, content_type="application/json")

    assert answer.status_code == 201
    (tool,) = events(ann, "tool_call")
    assert tool.payload["output"] == "a\\0b?c"
    assert events(ann, "api_call")[-1].payload["body"] == {"\\0path": "x\\0"}


def test_past_the_reports_day_bound_reports_are_dropped_and_counted(ann, settings):
    settings.AGENTS_TRAJECTORY_REPORTED_DAY_EVENTS = 2  # a report and the record of its call
    client = api(token_issue(agent=ann, kind="api"))

    assert report_tool_call(client, command="first").status_code == 201
    full = report_tool_call(client, command="second")

    assert full.status_code == 429 and full.json()["error"]["code"] == "trajectory_full"
    reports = TrajectoryEvent.objects.filter(kind="tool_call")
    assert [e.payload["command"] for e in reports] == ["first"]
    # The second tool call and the record of the call that carried it were dropped, and counted.
    day = TrajectoryDay.objects.get(agent=ann)
    assert (day.dropped, day.reported_events, day.events) == (2, 2, 0)


def test_past_the_platforms_day_bound_observed_events_are_dropped_and_counted(ann, settings):
    settings.AGENTS_TRAJECTORY_API_DAY_EVENTS = 1
    client = api(token_issue(agent=ann, kind="api"))

    assert client.get("/api/v1/budget").status_code in {200, 409}
    assert client.get("/api/v1/checkpoints").status_code == 200  # the call is never refused

    assert [e.payload["path"] for e in events(ann, "api_call")] == ["/api/v1/budget"]
    assert TrajectoryDay.objects.get(agent=ann).dropped == 1
    assert report_tool_call(client, command="still kept").status_code == 201


def test_a_failure_to_record_never_breaks_the_call(ann, monkeypatch):
    def broken(**_: object) -> None:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(trajectory, "_append", broken)
    listed = api(token_issue(agent=ann, kind="api")).get("/api/v1/checkpoints")
    assert listed.status_code == 200 and listed.json() == {"checkpoints": []}


def test_the_database_refuses_to_change_or_delete_a_recorded_event(ann):
    client = api(token_issue(agent=ann, kind="api"))
    report_tool_call(client, command=SECRET_STEP)
    table = TrajectoryEvent._meta.db_table

    statements = [f"UPDATE {table} SET size = size + 1", f"DELETE FROM {table}"]
    if connection.vendor == "postgresql":  # a statement trigger: refused even touching nothing
        statements.append(f"DELETE FROM {table} WHERE id = -1")
    for statement in statements:
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        TrajectoryEvent.objects.filter(agent=ann).delete()

    assert [e.payload["command"] for e in events(ann, "tool_call")] == [SECRET_STEP]


def _agent_routes() -> list[str]:
    """Every URL under /api/ and /proxy/, its parameters filled in."""
    found: list[str] = []

    def walk(patterns: list, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith(("api/", "proxy/")):
                for name in pattern.pattern.converters:
                    route = route.replace(f"<str:{name}>", "1").replace(f"<int:{name}>", "1")
                found.append("/" + route.lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns, "")
    return found


def test_no_route_an_agent_can_call_reads_its_trajectory_back(db, settings):
    settings.CLUSTER_BACKEND = "local"
    running_phase()
    cat = agent_with_gpu_hours("cat", {"phase-1": 0.0})
    tokens = {kind: token_issue(agent=cat, kind=kind) for kind in ("api", "proxy")}
    report_tool_call(api(tokens["api"]), command=SECRET_STEP, output="the answers")
    routes = _agent_routes()
    assert "/api/v1/trajectory/events" in routes and "/proxy/v1/models" in routes

    for route in routes:
        for token in tokens.values():
            for method in ("get", "post"):
                client = Client(headers={"Authorization": f"Bearer {token}"})
                client.raise_request_exception = False  # a 500 must not show it either
                answer = getattr(client, method)(route, content_type="application/json")
                assert SECRET_STEP not in answer.content.decode(errors="replace"), route


def test_a_model_call_keeps_the_system_prompt_and_the_last_messages_cut(ann):
    conversation = [{"role": "system", "content": "You are an agent. " * 1000}] + [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "y" * 10_000}
        for i in range(1, 21)
    ]
    body = json.dumps({"model": "m", "messages": conversation}).encode()
    reply = ReplyCollector()
    reply.add_chunk({"choices": [{"delta": {"content": "I will run "}}]})
    reply.add_chunk({"choices": [{"delta": {"content": "the tests."}}]})
    for piece in (
        {"index": 0, "id": "call_1", "function": {"name": "shell", "arguments": '{"command": '}},
        {"index": 0, "function": {"arguments": '"pytest -q"}'}},
    ):
        reply.add_chunk({"choices": [{"delta": {"tool_calls": [piece]}}]})

    event = model_call_record(
        agent=ann, model="m", request_body=body, reply=reply, status=200, prompt_tokens=9000,
        completion_tokens=4, cost_usd=Decimal("0.01"), latency_ms=120,
    )  # fmt: skip

    assert event is not None and event.size <= MAX_EVENT_BYTES
    kept = event.payload["messages"]
    assert event.payload["messages_in_request"] == 21
    assert kept[0]["role"] == "system" and "chars cut]" in kept[0]["content"]
    assert [m["content"].split(" ")[1] for m in kept[1:]] == [str(i) for i in range(13, 21)]
    assert event.payload["reply"] == "I will run the tests."
    assert event.payload["tool_calls"] == [
        {"id": "call_1", "name": "shell", "arguments": '{"command": "pytest -q"}'}
    ]
    assert event.payload["cost_usd"] == "0.01" and event.payload["prompt_tokens"] == 9000


def test_a_whole_reply_is_collected_up_to_its_bound():
    reply = ReplyCollector()
    call = {"id": "call_9", "function": {"name": "editor", "arguments": "{}"}}
    message = {"content": "z" * (REPLY_CHARS + 10), "tool_calls": [call]}
    reply.add_completion({"choices": [{"message": message}]})
    assert reply.text() == "z" * REPLY_CHARS + "…[reply cut]"
    assert reply.calls() == [{"id": "call_9", "name": "editor", "arguments": "{}"}]


def test_the_commands_a_reply_proposes_in_fenced_shell_blocks_are_kept_apart(ann):
    # As mini-swe-agent's model answers: a thought, then exactly one ```bash block it runs.
    reply = ReplyCollector()
    reply.add_completion({"choices": [{"message": {"content": (
        "THOUGHT: look at the data first.\n\n```bash\nls -la data/ && wc -l data/*.jsonl\n```\n"
        "Then maybe:\n```python\nprint('not a shell block')\n```\n```sh\nsbatch train.sh\n```"
    )}}]})  # fmt: skip
    event = model_call_record(
        agent=ann, model="m", request_body=b'{"messages": []}', reply=reply, status=200,
        prompt_tokens=1, completion_tokens=1, cost_usd=Decimal("0"), latency_ms=1,
        protocol="responses", request_messages=[{"role": "user", "content": "go"}],
    )  # fmt: skip
    assert event is not None
    assert event.payload["proposed_commands"] == [
        "ls -la data/ && wc -l data/*.jsonl",
        "sbatch train.sh",
    ]
    assert event.payload["protocol"] == "responses"
    assert event.payload["messages"] == [{"role": "user", "content": "go"}]


@pytest.mark.slow
def test_the_proxy_records_each_model_call_with_its_content(arena, scripted_llm):
    scripted_llm.scripts["scripted-upstream"] = Script("I will read the data first.", delay_s=0)
    Upstream.objects.create(
        name="scripted",
        base_url=scripted_llm.base_url,
        upstream_model="scripted-upstream",
        usd_per_million_prompt_tokens=Decimal("1"),
        usd_per_million_completion_tokens=Decimal("1"),
    )
    bob = agent_create(name="bob", credit_limit=Decimal("5"))
    messages = [{"role": "user", "content": "Plan your first experiment."}]

    # Read to the end of the body, past [DONE]: the proxy settles and records as it closes.
    answer = httpx2.post(
        f"{arena.url}/proxy/v1/chat/completions",
        json={"model": "scripted", "messages": messages, "max_tokens": 50, "stream": True},
        headers={"Authorization": f"Bearer {token_issue(agent=bob, kind='proxy')}"},
        timeout=60,
    )
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in answer.text.splitlines()
        if line.startswith("data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

    (call,) = events(bob, "model_call")
    assert text == "I will read the data first." and call.reported is False
    assert call.payload["model"] == "scripted" and call.payload["status"] == 200
    assert call.payload["messages"] == messages and call.payload["reply"] == text
    assert Decimal(call.payload["cost_usd"]) == bob.proxy_calls.get().cost_usd
