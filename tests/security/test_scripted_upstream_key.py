"""Issue 25, finding 14: the demo's scripted upstream listens on a loopback port every user of
the host can reach. Before, it answered anyone: an agent could call the model directly, around
the proxy's meter and its trajectory. Now it answers only requests carrying the upstream key
the proxy holds; an agent's own connection is refused with 401, and the proxy still works."""

from __future__ import annotations

import json
import os
import signal

import pytest
from django.test import Client

from agents.models import ProxyCall, Upstream
from agents.services import token_issue
from arena.phases.demo import HARNESS_MODEL, scripted_upstream_start

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHAT = {"model": HARNESS_MODEL, "messages": [{"role": "user", "content": "Summarise."}]}


@pytest.fixture
def scripted_upstream(tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    process = scripted_upstream_start(tmp_path / "models", lambda line: None)
    yield Upstream.objects.get(name=HARNESS_MODEL)
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=10)


def test_an_agent_calling_the_scripted_upstream_directly_is_refused(players, scripted_upstream):
    ann = players("sec_upstream_a")
    chat = f"{scripted_upstream.base_url}/chat/completions"
    for guess in ("", "-H 'Authorization: Bearer sk-guess'"):
        done = ann.shell(
            f"curl -s -o /dev/null -w '%{{http_code}}' -X POST {guess} "
            f"-H 'Content-Type: application/json' -d '{json.dumps(CHAT)}' {chat}"
        )
        assert done.stdout == "401", (done.stdout, done.stderr)
    listed = ann.shell(
        f"curl -s -o /dev/null -w '%{{http_code}}' {scripted_upstream.base_url}/models"
    )
    assert listed.stdout == "401"

    token = token_issue(agent=ann.provisioned.agent, kind="proxy")
    reply = Client(headers={"Authorization": f"Bearer {token}"}).post(
        "/proxy/v1/chat/completions", data=json.dumps(CHAT), content_type="application/json"
    )
    assert reply.status_code == 200, reply.content
    assert reply.json()["choices"][0]["message"]["content"].startswith("Summary")
    assert ProxyCall.objects.get(agent=ann.provisioned.agent).status == 200
