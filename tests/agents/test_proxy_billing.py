"""The proxy charges at least what the upstream bills, and never more than it reserved.

Each case is an attack from issue 13, played through the live site (daphne, PostgreSQL)
against `BillingLLM`, a fake upstream that bills like a real one: prompt tokens over the whole
request body, completion tokens summed over `n` choices, billed on receipt even when the
caller hangs up.
"""

from __future__ import annotations

import contextlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx2
import pytest

from agents.models import Agent, ProxyCall, Upstream
from agents.services import cost_usd
from tests.support.billing_llm import BillingLLM
from tests.support.proxy_calls import proxy_agent, settled
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def billing_llm():
    server = BillingLLM()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def upstreams(billing_llm):
    billing_llm.reset()
    prices = {
        "usd_per_million_prompt_tokens": Decimal("2.50"),
        "usd_per_million_completion_tokens": Decimal("10"),
        "max_completion_tokens": 4096,
    }
    return {
        name: Upstream.objects.create(
            name=name, base_url=billing_llm.base_url, upstream_model=name, **prices
        )
        for name in ("billing", "billing-slow")
    }


def _post(arena, token: str, body: dict[str, Any], timeout: float = 60) -> httpx2.Response:
    return httpx2.post(
        f"{arena.url}/proxy/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
    )


def _billed(billing_llm: BillingLLM, upstream: Upstream) -> Decimal:
    return sum(
        (
            cost_usd(upstream, prompt_tokens=b.prompt_tokens, completion_tokens=b.completion_tokens)
            * b.price_factor
            for b in billing_llm.billed()
        ),
        Decimal(0),
    )


def _assert_charged_covers_bill(agent: Agent, billing_llm: BillingLLM, upstream: Upstream):
    charged = sum((c.cost_usd for c in ProxyCall.objects.filter(agent=agent)), Decimal(0))
    reserved = sum((c.reserved_usd for c in ProxyCall.objects.filter(agent=agent)), Decimal(0))
    billed = _billed(billing_llm, upstream)
    assert billed > 0
    assert agent.credit_reserved == 0
    assert agent.credit_spent == charged
    assert billed <= charged <= reserved, (billed, charged, reserved)


def test_n_choices_are_charged_for_every_choice(arena, upstreams, billing_llm):
    agent, token = proxy_agent("nina")
    reply = _post(
        arena, token, {"model": "billing", "messages": MESSAGES, "n": 8, "max_tokens": 3000}
    )
    assert reply.status_code == 200 and len(reply.json()["choices"]) == 8
    _assert_charged_covers_bill(settled(agent), billing_llm, upstreams["billing"])


def test_tools_and_response_format_are_charged_as_prompt(arena, upstreams, billing_llm):
    agent, token = proxy_agent("tess")
    properties = {f"field_{i}": {"type": "string", "description": "x " * 40} for i in range(900)}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": properties}}}]  # fmt: skip
    schema = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": properties}}}  # fmt: skip
    for extra in ({"tools": tools}, {"response_format": schema}):
        body = {"model": "billing", "messages": MESSAGES, "max_tokens": 10, **extra}
        assert _post(arena, token, body).status_code == 200
    agent = settled(agent, calls=2)
    assert billing_llm.billed()[0].prompt_tokens > 50_000
    _assert_charged_covers_bill(agent, billing_llm, upstreams["billing"])


def test_an_unset_max_tokens_is_bounded_by_the_proxy(arena, upstreams, billing_llm):
    agent, token = proxy_agent("mona")
    assert _post(arena, token, {"model": "billing", "messages": MESSAGES}).status_code == 200
    assert billing_llm.billed()[0].completion_tokens == 4096
    _assert_charged_covers_bill(settled(agent), billing_llm, upstreams["billing"])


def test_a_stream_closed_after_its_first_chunk_is_charged_its_bill(arena, upstreams, billing_llm):
    agent, token = proxy_agent("sam")
    big = [{"role": "user", "content": "lorem ipsum, " * 8000}]  # ~100 KB
    body = {"model": "billing", "messages": big, "max_tokens": 2000, "stream": True}
    with httpx2.stream(
        "POST",
        f"{arena.url}/proxy/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ) as reply:
        first = next(reply.iter_lines())
        assert first.startswith("data: ")
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    assert call.prompt_tokens > 0
    _assert_charged_covers_bill(agent, billing_llm, upstreams["billing"])


def test_a_client_that_hangs_up_on_a_whole_answer_is_still_charged(arena, upstreams, billing_llm):
    agent, token = proxy_agent("hank")
    body = {"model": "billing-slow", "messages": MESSAGES, "max_tokens": 1000}
    with pytest.raises(httpx2.TimeoutException):
        _post(arena, token, body, timeout=0.5)
    agent = settled(agent)
    _assert_charged_covers_bill(agent, billing_llm, upstreams["billing-slow"])


@pytest.mark.parametrize(
    "extra",
    [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                }
            ]
        },  # fmt: skip
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}
                    ],
                }
            ]
        },  # fmt: skip
        {"service_tier": "priority"},
        {"prediction": {"type": "content", "content": "word " * 5000}},
        {"modalities": ["text", "audio"]},
        {"web_search_options": {}},
        {"some_future_parameter": 1},
        {"n": 1000},
        {"max_tokens": True},
    ],
    ids=[
        "image",
        "audio",
        "priority-tier",
        "prediction",
        "audio-out",
        "web-search",
        "unknown",
        "huge-n",
        "bool-max",
    ],  # fmt: skip
)
def test_what_the_proxy_cannot_price_is_refused(arena, upstreams, billing_llm, extra):
    agent, token = proxy_agent("uma")
    reply = _post(arena, token, {"model": "billing", "messages": MESSAGES, **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert billing_llm.billed() == []
    agent.refresh_from_db()
    assert agent.credit_spent == 0 and agent.credit_reserved == 0


def test_mixed_concurrent_calls_are_charged_at_least_their_bill(arena, upstreams, billing_llm):
    agent, token = proxy_agent("cody", credit="5")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "description": "y " * 3000}}}]  # fmt: skip
    bodies = [
        {"model": "billing", "messages": MESSAGES, "n": 4, "max_tokens": 500},
        {"model": "billing", "messages": MESSAGES, "tools": tools, "max_tokens": 50},
        {"model": "billing", "messages": MESSAGES, "max_tokens": 300, "stream": True},
    ] * 6
    start = threading.Barrier(len(bodies))

    def call(body: dict[str, Any]) -> int:
        start.wait()
        return _post(arena, token, body).status_code

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        statuses = list(pool.map(call, bodies))
    assert set(statuses) <= {200, 402} and 200 in statuses
    agent = settled(agent, calls=statuses.count(200))
    assert agent.credit_spent <= agent.credit_limit
    _assert_charged_covers_bill(agent, billing_llm, upstreams["billing"])
    assert json.dumps(statuses)  # every call answered


@pytest.mark.parametrize(
    "script",
    [Script("an answer with no usage"), Script("cut " * 40, cut_after_chars=20)],
    ids=["no-usage", "cut-mid-stream"],
)
def test_a_call_whose_usage_is_unknown_is_charged_its_reservation(arena, scripted_llm, script):
    scripted_llm.scripts["usage-unknown"] = script
    Upstream.objects.create(
        name="opaque", base_url=scripted_llm.base_url, upstream_model="usage-unknown",
        usd_per_million_prompt_tokens=Decimal("2.50"), usd_per_million_completion_tokens=Decimal("10"),
    )  # fmt: skip
    agent, token = proxy_agent("opal")
    body = {"model": "opaque", "messages": MESSAGES, "max_tokens": 100, "stream": True}
    with contextlib.suppress(httpx2.HTTPError):  # a cut reaches the agent as a broken stream
        _post(arena, token, body)
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    assert call.cost_usd == call.reserved_usd > 0 and "no usage" in call.error
    assert agent.credit_spent == call.reserved_usd and agent.credit_reserved == 0


def test_an_upstream_error_is_charged_nothing_and_releases_the_reservation(arena, scripted_llm):
    scripted_llm.scripts["failing"] = Script("", fail_status=500)
    Upstream.objects.create(
        name="failing", base_url=scripted_llm.base_url, upstream_model="failing",
        usd_per_million_prompt_tokens=Decimal("2.50"), usd_per_million_completion_tokens=Decimal("10"),
    )  # fmt: skip
    agent, token = proxy_agent("fay")
    for stream in (False, True):
        body = {"model": "failing", "messages": MESSAGES, "max_tokens": 10, "stream": stream}
        assert _post(arena, token, body).status_code == 502
    agent = settled(agent, calls=2)
    assert agent.credit_spent == 0 and agent.credit_reserved == 0
    assert [c.status for c in ProxyCall.objects.filter(agent=agent)] == [500, 500]
