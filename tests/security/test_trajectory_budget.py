"""Issue 25, item 4: what the platform observes of an agent must never be crowded out by what the
agent reports. The agent's harness may report tool calls (`POST /api/v1/trajectory/events`),
and they shared one daily budget with the events the platform records itself: an agent that
reported enough (some thousands of calls) blinded its own trajectory for the rest of the UTC
day. Now reports, and the API's records of the calls that carried them, have a budget of their
own, and the platform's events theirs.

The agent floods through the agent API with its own token (Django's client on the real routes,
with the day's bounds lowered: the live site's defaults take thousands of calls to fill)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from agents.models import TrajectoryDay, TrajectoryEvent
from agents.services import token_issue
from agents.trajectory import ReplyCollector, model_call_record, tool_call_observed
from tests.evalsuite.on_demand_builders import provisioned

pytestmark = pytest.mark.django_db


@pytest.fixture
def bounds(settings):
    settings.AGENTS_TRAJECTORY_TOOL_DAY_EVENTS = 30  # what the platform observes
    settings.AGENTS_TRAJECTORY_MODEL_DAY_EVENTS = 30
    settings.AGENTS_TRAJECTORY_API_DAY_EVENTS = 30
    settings.AGENTS_TRAJECTORY_REPORTED_DAY_EVENTS = 20  # what the agent reports


def platform_observes(agent) -> None:
    """The platform's harness runs a tool call as the agent, the proxy settles a model call:
    both are recorded."""
    seen_tool = tool_call_observed(
        agent=agent, tool="shell", command="cat /organizers/heldout.jsonl", output="...",
        exit_code=0, duration_s=0.1,
    )  # fmt: skip
    seen_model = model_call_record(
        agent=agent, model="m", request_body=b'{"messages": []}', reply=ReplyCollector(),
        status=200, prompt_tokens=1, completion_tokens=1, cost_usd=Decimal("0.01"), latency_ms=5,
    )  # fmt: skip
    assert seen_tool is not None and seen_model is not None
    observed = TrajectoryEvent.objects.filter(agent=agent, reported=False)
    assert observed.filter(
        kind="tool_call", payload__command="cat /organizers/heldout.jsonl"
    ).exists()
    assert observed.filter(kind="model_call").exists()


def test_reports_that_fill_their_budget_leave_the_platforms_events_recorded(bounds, tmp_path):
    agent, _ = provisioned("flood", tmp_path)
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})
    replies = [
        client.post(
            "/api/v1/trajectory/events",
            {"command": f"echo {n}", "output": "x" * 40_000},
            content_type="application/json",
        )
        for n in range(40)
    ]
    refused = [r for r in replies if r.status_code == 429]
    assert refused and refused[0].json()["error"]["code"] == "trajectory_full"

    # Then the platform observes the agent: its harness runs a tool call, the proxy settles a
    # model call, the agent calls the API.
    platform_observes(agent)
    assert client.get("/api/v1/budget").status_code == 200
    observed = TrajectoryEvent.objects.filter(agent=agent, reported=False)
    assert observed.filter(kind="api_call", payload__path="/api/v1/budget").exists()
    assert TrajectoryDay.objects.get(agent=agent).dropped == len(refused) * 2  # counted


def test_api_calls_that_fill_their_budget_leave_the_model_and_tool_calls_recorded(
    settings, tmp_path
):
    """Review of issue 25: any API route's call is recorded with a summary of its body (up to
    32 KiB). At the default rate limit an agent filled the platform's observed day with them in
    minutes, and the proxy's model calls and the harness's tool calls were dropped until the
    next UTC day. Now the API's records have a budget of their own."""
    settings.AGENTS_TRAJECTORY_API_DAY_EVENTS = 30
    agent, _ = provisioned("apiflood", tmp_path)
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})
    for n in range(40):  # ~30 KB bodies, as many as the bound and more, on an ordinary route
        client.post(
            "/api/v1/journal",
            {"text": f"{n}", "padding": ["x" * 3000] * 10},
            content_type="application/json",
        )

    platform_observes(agent)
    day = TrajectoryDay.objects.get(agent=agent)
    assert (day.dropped, day.api_dropped) == (10, 10)  # the flood past its bound, counted
    assert TrajectoryEvent.objects.filter(agent=agent, kind="api_call").count() == 30
