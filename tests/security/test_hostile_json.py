"""JSON an agent crafts to break what reads it: NaN and Infinity (Python's json takes them,
PostgreSQL's jsonb refuses them, so a call recorded with such a body vanished from the agent's
trajectory), a number past float range, nesting a hundred thousand deep, a 5,000-digit integer.
Every one is refused as bad JSON, on the agent API, the API proxy and the voters' endpoints,
and the refused call is still recorded."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import ProxyCall, TrajectoryEvent
from agents.services import token_issue
from arena.streamed_chat import first_json_object
from tests.evalsuite.on_demand_builders import provisioned

pytestmark = pytest.mark.django_db

HOSTILE_BODIES = {
    "NaN": b'{"script": "#!/bin/bash\\ntrue", "time_limit_minutes": 5, "pad": NaN}',
    "Infinity": b'{"script": "#!/bin/bash\\ntrue", "time_limit_minutes": 5, "pad": -Infinity}',
    "1e400": b'{"script": "#!/bin/bash\\ntrue", "time_limit_minutes": 5, "pad": 1e400}',
    "deep": b'{"pad": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "digits": b'{"pad": ' + b"9" * 5_000 + b"}",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_BODIES))
def test_the_agent_api_refuses_hostile_json_and_still_records_the_call(tmp_path, kind):
    agent, _ = provisioned(f"json_{kind.lower()}", tmp_path)
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})

    reply = client.post("/api/v1/jobs", data=HOSTILE_BODIES[kind], content_type="application/json")

    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "bad_json"
    recorded = TrajectoryEvent.objects.filter(agent=agent, kind=TrajectoryEvent.Kind.API_CALL).get()
    assert recorded.payload["status"] == 400 and recorded.payload["path"] == "/api/v1/jobs"
    assert not agent.cluster_account.jobs.exists()


@pytest.mark.parametrize("kind", sorted(HOSTILE_BODIES))
def test_the_api_proxy_refuses_hostile_json_with_400_not_500(tmp_path, kind):
    agent, _ = provisioned(f"proxy_json_{kind.lower()}", tmp_path)
    token = token_issue(agent=agent, kind="proxy")
    client = Client(headers={"Authorization": f"Bearer {token}"})
    body = HOSTILE_BODIES[kind].replace(b"{", b'{"model": "tiny-chat", ', 1)

    reply = client.post("/proxy/v1/chat/completions", data=body, content_type="application/json")

    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": "the request body is not valid JSON",
        "type": "invalid_request_error",
        "code": "bad_json",
    }
    assert not ProxyCall.objects.filter(agent=agent).exists()


@pytest.mark.parametrize("kind", ["NaN", "deep", "digits"])
def test_the_voters_endpoints_answer_hostile_json_with_400_not_500(kind):
    reply = Client().post(
        "/api/battles", data=HOSTILE_BODIES[kind], content_type="application/json"
    )

    assert reply.status_code == 400


def test_a_judge_reply_nested_a_thousand_deep_is_no_object_not_a_crash():
    reply = 'verdict: {"a": ' + "[" * 5_000 + ' and then {"ok": true}'

    assert first_json_object(reply, lambda data: "ok" in data) == {"ok": True}
    assert first_json_object('{"a": ' + "[" * 5_000, lambda data: True) is None


def test_a_thousand_bad_environment_names_are_named_back_bounded(tmp_path):
    agent, _ = provisioned("env_flood", tmp_path)
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})
    env = {f"bad-name-{i}-" + "x" * 2_000: "1" for i in range(1_000)}

    reply = client.post(
        "/api/v1/jobs",
        data={"script": "#!/bin/bash\ntrue", "time_limit_minutes": 5, "env": env},
        content_type="application/json",
    )

    assert reply.status_code == 400
    message = reply.json()["error"]["message"]
    assert "invalid environment variable names" in message and "and 990 more" in message
    assert len(message) < 2_000


def test_an_agent_row_without_a_cluster_account_gets_409_for_its_budget_not_500():
    from agents.services import agent_create

    judge = agent_create(name="judge_without_account")
    client = Client(headers={"Authorization": f"Bearer {token_issue(agent=judge, kind='api')}"})

    reply = client.get("/api/v1/budget")

    assert reply.status_code == 409
    assert reply.json()["error"]["code"] == "not_provisioned"
