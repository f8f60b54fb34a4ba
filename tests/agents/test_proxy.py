"""The metered API proxy, called with the official `openai` client against the live site,
forwarding to a real `transformers serve` upstream (the tiny instruct model)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import httpx2
import openai
import pytest

from agents.models import Agent, ProxyCall, Upstream
from agents.services import agent_create, token_issue
from tests.conftest import TEST_LOG_DIR

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "What is 2 plus 3?"}]


@pytest.fixture
def upstream(model_servers):
    endpoint = model_servers["instruct"]
    return Upstream.objects.create(
        name="tiny-chat",
        base_url=endpoint.base_url,
        upstream_model=endpoint.model,
        api_key=endpoint.api_key,  # the model server's own key: it answers no one else
        usd_per_million_prompt_tokens=Decimal("1000"),  # $0.001 a token: budgets run out fast
        usd_per_million_completion_tokens=Decimal("2000"),
        max_completion_tokens=64,
    )


def client_for(arena, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{arena.url}/proxy/v1", api_key=token, max_retries=0, timeout=60)


def test_a_call_is_forwarded_metered_and_logged(arena, upstream):
    agent = agent_create(name="alice", credit_limit=Decimal("10"))
    client = client_for(arena, token_issue(agent=agent, kind="proxy"))

    assert [m.id for m in client.models.list().data] == ["tiny-chat"]
    reply = client.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=20)

    assert reply.choices[0].message.content
    assert reply.model == "tiny-chat"  # the upstream's own name stays behind the proxy
    call = ProxyCall.objects.get()
    assert call.status == 200 and call.prompt_tokens > 0 and call.completion_tokens > 0
    expected = (
        call.prompt_tokens * Decimal("1000") + call.completion_tokens * Decimal("2000")
    ) / 1_000_000
    assert call.cost_usd == expected.quantize(Decimal("0.000001"))
    agent.refresh_from_db()
    assert agent.credit_spent == call.cost_usd and agent.credit_reserved == 0


def test_a_streamed_call_is_metered(arena, upstream):
    agent = agent_create(name="bob", credit_limit=Decimal("10"))
    client = client_for(arena, token_issue(agent=agent, kind="proxy"))
    stream = client.chat.completions.create(
        model="tiny-chat", messages=MESSAGES, max_tokens=20, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
    call = ProxyCall.objects.get()
    assert call.stream and call.completion_tokens > 0 and call.cost_usd > 0
    agent.refresh_from_db()
    assert agent.credit_spent == call.cost_usd and agent.credit_reserved == 0


def test_twenty_concurrent_calls_at_the_edge_of_the_budget_never_overspend(arena, upstream):
    # Each call reserves its worst case (~$0.33 here); $1.50 covers four at a time, not twenty.
    agent = agent_create(name="carol", credit_limit=Decimal("1.50"))
    token = token_issue(agent=agent, kind="proxy")
    start = threading.Barrier(20)

    def call(_: int) -> int:
        client = client_for(arena, token)
        start.wait()
        try:
            client.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=64)
        except openai.APIStatusError as refused:
            return refused.status_code
        return 200

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(call, range(20)))

    agent.refresh_from_db()
    assert agent.credit_reserved == 0
    assert agent.credit_spent <= agent.credit_limit
    assert statuses.count(200) >= 1 and statuses.count(402) >= 1
    assert set(statuses) <= {200, 402}
    assert sum(c.cost_usd for c in ProxyCall.objects.filter(status=200)) == agent.credit_spent


def test_a_spent_credit_gets_402_with_a_clear_json_error(arena, upstream):
    agent = agent_create(name="dave", credit_limit=Decimal("0.01"))
    client = client_for(arena, token_issue(agent=agent, kind="proxy"))
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="tiny-chat", messages=MESSAGES)
    assert refused.value.status_code == 402
    error = refused.value.response.json()["error"]
    assert error["code"] == "credit_exhausted"
    assert "your API credit is spent" in error["message"]
    assert Agent.objects.get(pk=agent.pk).credit_spent == 0


def test_bad_tokens_and_unknown_models_are_refused(arena, upstream):
    agent = agent_create(name="erin")
    with pytest.raises(openai.AuthenticationError):
        client_for(arena, "arena_proxy_not-a-token").models.list()
    old = token_issue(agent=agent, kind="proxy")
    token_issue(agent=agent, kind="proxy")  # a new token revokes the old one
    with pytest.raises(openai.AuthenticationError):
        client_for(arena, old).models.list()
    api_token = token_issue(agent=agent, kind="api")  # an API token is not a proxy token
    with pytest.raises(openai.AuthenticationError):
        client_for(arena, api_token).models.list()
    fresh = client_for(arena, token_issue(agent=agent, kind="proxy"))
    with pytest.raises(openai.NotFoundError):
        fresh.chat.completions.create(model="gpt-5", messages=MESSAGES)


def test_the_upstream_key_never_reaches_an_agent_or_a_log(arena, upstream):
    agent = agent_create(name="frank", credit_limit=Decimal("10"))
    token = token_issue(agent=agent, kind="proxy")
    client = client_for(arena, token)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-chat", messages=MESSAGES, max_tokens=8
    )
    streamed = httpx2.post(
        f"{arena.url}/proxy/v1/chat/completions",
        json={"model": "tiny-chat", "messages": MESSAGES, "max_tokens": 8, "stream": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert "data: " in streamed.text
    seen = raw.text + str(dict(raw.headers)) + streamed.text + str(dict(streamed.headers))
    seen += str(client.models.with_raw_response.list().text)
    assert upstream.api_key not in seen
    for call in ProxyCall.objects.all():
        assert upstream.api_key not in str(call.__dict__)
    assert upstream.api_key not in Path(TEST_LOG_DIR / "daphne.log").read_text()
