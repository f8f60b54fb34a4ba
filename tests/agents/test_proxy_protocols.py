"""The proxy's other wire protocols, called with the official SDKs as agents' scaffolds call
them: OpenAI Responses and embeddings with `openai`, Anthropic Messages with `anthropic`.

Through the live site (daphne, PostgreSQL) against `BillingLLM`, which bills each protocol as
its real service does (cached input, cache writes, reasoning tokens, embeddings). Each case
holds the chat proxy's guarantees: billed <= charged <= reserved, nothing charged for what was
refused, and the trajectory records the call in its own terms.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from agents.credit import Usage, usage_cost_usd
from agents.models import Agent, ProxyCall, TrajectoryEvent, Upstream
from agents.pricing import MAX_EMBEDDING_INPUTS
from tests.support.billing_llm import Bill, BillingLLM
from tests.support.proxy_calls import proxy_agent, settled

pytestmark = pytest.mark.slow

PROTOCOLS = ["chat", "responses", "embeddings", "messages"]
TOOL = {"name": "lookup", "description": "look a word up", "input_schema": {"type": "object"}}
FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


@pytest.fixture(scope="module")
def billing_llm():
    server = BillingLLM()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def upstream(billing_llm):
    billing_llm.reset()
    return Upstream.objects.create(
        name="billing", base_url=billing_llm.base_url, upstream_model="billing",
        protocols=PROTOCOLS,
        usd_per_million_prompt_tokens=Decimal("3"), usd_per_million_completion_tokens=Decimal("15"),
        usd_per_million_cached_prompt_tokens=Decimal("0.30"),
        usd_per_million_cache_write_tokens=Decimal("3.75"),
        usd_per_million_embedding_tokens=Decimal("0.10"),
        max_completion_tokens=4096,
    )  # fmt: skip


def _openai(arena, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{arena.url}/proxy/v1", api_key=token, max_retries=0, timeout=60)


def _anthropic(arena, token: str, **auth: Any) -> anthropic.Anthropic:
    # The SDK appends /v1/messages to its base URL, as Claude Code does with ANTHROPIC_BASE_URL.
    credentials = auth or {"api_key": token}
    return anthropic.Anthropic(
        base_url=f"{arena.url}/proxy", max_retries=0, timeout=60, **credentials
    )


def _bill_cost(upstream: Upstream, bill: Bill) -> Decimal:
    usage = Usage(
        bill.prompt_tokens,
        bill.completion_tokens,
        cached_prompt=bill.cached_prompt_tokens,
        cache_write=bill.cache_write_tokens,
        embedding=bill.embedding,
    )
    return usage_cost_usd(upstream, usage) * bill.price_factor


def _assert_charged_covers_bill(agent: Agent, billing_llm: BillingLLM, upstream: Upstream):
    calls = ProxyCall.objects.filter(agent=agent)
    charged = sum((c.cost_usd for c in calls), Decimal(0))
    reserved = sum((c.reserved_usd for c in calls), Decimal(0))
    billed = sum((_bill_cost(upstream, b) for b in billing_llm.billed()), Decimal(0))
    assert billed > 0
    assert agent.credit_reserved == 0 and agent.credit_spent == charged
    assert billed <= charged <= reserved, (billed, charged, reserved)


def _model_calls(agent: Agent) -> list[dict[str, Any]]:
    events = TrajectoryEvent.objects.filter(agent=agent, kind=TrajectoryEvent.Kind.MODEL_CALL)
    return [e.payload for e in events.order_by("pk")]


# --- OpenAI Responses ------------------------------------------------------------------------
def test_a_responses_call_is_forwarded_renamed_metered_and_recorded(arena, upstream, billing_llm):
    agent, token = proxy_agent("rhea")
    client = _openai(arena, token)
    reply = client.responses.create(
        model="billing", instructions="Be brief.", input="What is 2 plus 3?",
        max_output_tokens=40, tools=[FUNCTION],
    )  # fmt: skip

    assert reply.model == "billing" and reply.output_text.strip()
    assert any(item.type == "function_call" for item in reply.output)
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    assert call.protocol == "responses" and call.status == 200
    assert call.completion_tokens == 40 == billing_llm.billed()[0].completion_tokens
    assert call.cost_usd == _bill_cost(upstream, billing_llm.billed()[0])  # as the upstream bills
    _assert_charged_covers_bill(agent, billing_llm, upstream)
    [recorded] = _model_calls(agent)
    assert recorded["protocol"] == "responses" and recorded["reply"].startswith("w ")
    assert recorded["messages"][0] == {"role": "system", "content": "Be brief."}
    assert [c["name"] for c in recorded["tool_calls"]] == ["lookup"]


def test_a_streamed_response_bills_reasoning_as_output_and_cached_input_at_its_rate(
    arena, upstream, billing_llm
):
    agent, token = proxy_agent("rory")
    client = _openai(arena, token)
    events = list(
        client.responses.create(
            model="billing",
            input=[{"role": "user", "content": "Think, then answer."}],
            max_output_tokens=400,
            reasoning={"effort": "low"},
            prompt_cache_key="k1",
            stream=True,
        )  # fmt: skip
    )
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.model == "billing"
    assert final.response.usage.output_tokens_details.reasoning_tokens == 100
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    bill = billing_llm.billed()[0]
    assert call.stream and call.cached_prompt_tokens == bill.cached_prompt_tokens > 0
    assert call.completion_tokens == 400  # reasoning included, as OpenAI counts it
    assert call.cost_usd == _bill_cost(upstream, bill)
    _assert_charged_covers_bill(agent, billing_llm, upstream)


def test_a_responses_stream_hung_up_after_its_first_event_is_charged_its_bill(
    arena, upstream, billing_llm
):
    agent, token = proxy_agent("hugo")
    body = {"model": "billing", "input": "lorem ipsum, " * 4000, "max_output_tokens": 2000,
            "stream": True}  # fmt: skip
    with httpx2.stream(
        "POST", f"{arena.url}/proxy/v1/responses", json=body,
        headers={"Authorization": f"Bearer {token}"}, timeout=60,
    ) as reply:  # fmt: skip
        assert next(reply.iter_lines()).startswith("event: ")
    _assert_charged_covers_bill(settled(agent), billing_llm, upstream)


@pytest.mark.parametrize(
    "extra, said",
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id is not supported"),
        ({"conversation": "conv_1"}, "conversations are not supported"),
        ({"background": True}, "background responses are not supported"),
        ({"tools": [{"type": "web_search"}]}, "hosted tools"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "prices text only",
        ),
        ({"max_output_tokens": 0}, "positive integer"),
    ],
    ids=[
        "previous-response",
        "conversation",
        "background",
        "hosted-tool",
        "item-reference",
        "image",
        "zero-max",
    ],  # fmt: skip
)
def test_what_a_responses_call_cannot_be_priced_by_is_refused_clearly(
    arena, upstream, billing_llm, extra, said
):
    agent, token = proxy_agent("reva")
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(arena, token).responses.create(**{"model": "billing", "input": "hi", **extra})
    assert said in refused.value.message
    assert billing_llm.billed() == []
    agent.refresh_from_db()
    assert agent.credit_spent == 0 and agent.credit_reserved == 0


# --- OpenAI embeddings -----------------------------------------------------------------------
def test_embeddings_are_priced_per_input_token_at_the_embedding_rate(arena, upstream, billing_llm):
    agent, token = proxy_agent("emma")
    client = _openai(arena, token)
    one = client.embeddings.create(model="billing", input="a sentence to embed")
    many = client.embeddings.create(
        model="billing", input=["first text", "second text", "third"], encoding_format="float"
    )
    tokens = client.embeddings.create(model="billing", input=[[1, 2, 3], [4, 5]])

    assert len(one.data) == 1 and len(many.data) == 3 and len(tokens.data) == 2
    assert one.model == "billing" and isinstance(one.data[0].embedding[0], float)
    agent = settled(agent, calls=3)
    calls = ProxyCall.objects.filter(agent=agent).order_by("pk")
    assert [c.protocol for c in calls] == ["embeddings"] * 3
    assert [c.cost_usd for c in calls] == [_bill_cost(upstream, b) for b in billing_llm.billed()]
    _assert_charged_covers_bill(agent, billing_llm, upstream)
    assert _model_calls(agent)[1]["messages"][0] == {"role": "input", "content": "first text"}


@pytest.mark.parametrize(
    "given",
    [[], [""], ["ok", 3], ["x"] * (MAX_EMBEDDING_INPUTS + 1), [[1, -2]]],
    ids=["empty", "empty-string", "mixed", "too-many", "negative-token"],
)
def test_embeddings_that_cannot_be_priced_or_are_too_many_are_refused(
    arena, upstream, billing_llm, given
):
    agent, token = proxy_agent("erin")
    reply = httpx2.post(
        f"{arena.url}/proxy/v1/embeddings", json={"model": "billing", "input": given},
        headers={"Authorization": f"Bearer {token}"}, timeout=60,
    )  # fmt: skip
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unpriceable_request"
    assert billing_llm.billed() == []


# --- Anthropic Messages ----------------------------------------------------------------------
def test_an_anthropic_message_is_metered_with_its_cache_writes_and_reads(
    arena, upstream, billing_llm
):
    agent, token = proxy_agent("ada")
    client = _anthropic(arena, token)
    system = [
        {"type": "text", "text": "You are terse. " * 50, "cache_control": {"type": "ephemeral"}}
    ]
    reply = client.messages.create(
        model="billing", max_tokens=64, system=system, tools=[TOOL],
        messages=[{"role": "user", "content": "Look up 'arena'."}],
    )  # fmt: skip

    assert reply.model == "billing" and [b.type for b in reply.content] == ["text", "tool_use"]
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    bill = billing_llm.billed()[0]
    assert call.protocol == "messages" and call.status == 200
    assert call.prompt_tokens == bill.prompt_tokens  # input, cache writes and cache reads
    assert (call.cache_write_tokens, call.cached_prompt_tokens) == (
        bill.cache_write_tokens,
        bill.cached_prompt_tokens,
    )
    assert call.cache_write_tokens > 0
    assert call.cost_usd == _bill_cost(upstream, bill)
    _assert_charged_covers_bill(agent, billing_llm, upstream)
    [recorded] = _model_calls(agent)
    assert recorded["protocol"] == "messages" and [c["name"] for c in recorded["tool_calls"]] == [
        "lookup"
    ]
    assert recorded["messages"][-1] == {"role": "user", "content": "Look up 'arena'."}


def test_a_streamed_anthropic_message_is_metered_from_its_start_and_delta_events(
    arena, upstream, billing_llm
):
    agent, token = proxy_agent("abel")
    client = _anthropic(arena, None, auth_token=token)  # bearer, as some scaffolds send it
    with client.messages.stream(
        model="billing", max_tokens=300, tools=[TOOL],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Go.",
                                                "cache_control": {"type": "ephemeral"}}]}],
    ) as stream:  # fmt: skip
        final = stream.get_final_message()
    assert final.usage.output_tokens == 300 and final.model == "billing"
    agent = settled(agent)
    call = ProxyCall.objects.get(agent=agent)
    bill = billing_llm.billed()[0]
    assert call.stream and call.completion_tokens == 300
    assert call.cost_usd == _bill_cost(upstream, bill)
    _assert_charged_covers_bill(agent, billing_llm, upstream)
    assert [c["name"] for c in _model_calls(agent)[0]["tool_calls"]] == ["lookup"]


@pytest.mark.parametrize(
    "body, said",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens: Field required"),
        (
            {"max_tokens": 10, "system": [{"type": "text", "text": "s",
                                           "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
             "messages": [{"role": "user", "content": "hi"}]},
            "5-minute cache writes",
        ),
        (
            {"max_tokens": 10, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
             "messages": [{"role": "user", "content": "hi"}]},
            "only custom tools",
        ),
        (
            {"max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "AA"}}]}]},
            "blocks of type 'image'",
        ),
        (
            {"max_tokens": 100, "thinking": {"type": "enabled", "budget_tokens": 5000},
             "messages": [{"role": "user", "content": "hi"}]},
            "budget_tokens must be an integer below max_tokens",
        ),
    ],
    ids=["no-max-tokens", "hour-cache", "server-tool", "image", "thinking-over-max"],
)  # fmt: skip
def test_what_a_message_cannot_be_priced_by_is_refused_in_anthropics_shape(
    arena, upstream, billing_llm, body, said
):
    agent, token = proxy_agent("nora")
    reply = httpx2.post(
        f"{arena.url}/proxy/v1/messages", json={"model": "billing", **body},
        headers={"x-api-key": token, "anthropic-version": "2023-06-01"}, timeout=60,
    )  # fmt: skip
    assert reply.status_code == 400, reply.text
    answer = reply.json()
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    assert said in answer["error"]["message"]
    assert billing_llm.billed() == []


def test_spent_credit_reaches_the_anthropic_sdk_as_a_billing_error(arena, upstream, billing_llm):
    agent, token = proxy_agent("bess", credit="0.001")
    with pytest.raises(anthropic.APIStatusError) as refused:
        _anthropic(arena, token).messages.create(
            model="billing", max_tokens=4000, messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.status_code == 402
    assert refused.value.body["error"]["type"] == "billing_error"
    assert billing_llm.billed() == []


def test_concurrent_messages_at_the_edge_of_the_budget_never_overspend(
    arena, upstream, billing_llm
):
    # Each call reserves about $0.06 of output at most; $0.20 covers three at a time, not 16.
    agent, token = proxy_agent("cara", credit="0.20")
    start = threading.Barrier(16)

    def call(_: int) -> int:
        start.wait()
        try:
            _anthropic(arena, token).messages.create(
                model="billing", max_tokens=4000, messages=[{"role": "user", "content": "hi"}]
            )
            return 200
        except anthropic.APIStatusError as error:
            return error.status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(call, range(16)))
    assert set(statuses) <= {200, 402} and 200 in statuses and 402 in statuses
    agent = settled(agent, calls=16)
    assert agent.credit_spent <= agent.credit_limit
    _assert_charged_covers_bill(agent, billing_llm, upstream)


# --- the protocols an upstream speaks --------------------------------------------------------
def test_an_upstream_is_called_only_in_the_protocols_it_speaks_and_models_says_which(
    arena, upstream, billing_llm
):
    Upstream.objects.create(
        name="chat-only", base_url=billing_llm.base_url, upstream_model="billing",
        usd_per_million_prompt_tokens=Decimal("3"), usd_per_million_completion_tokens=Decimal("15"),
    )  # fmt: skip
    agent, token = proxy_agent("pia")
    listed = {m.id: m for m in _openai(arena, token).models.list().data}
    assert listed["billing"].model_extra["protocols"] == PROTOCOLS
    assert listed["chat-only"].model_extra["protocols"] == ["chat"]
    assert {m.id for m in _anthropic(arena, token).models.list().data} == {"billing", "chat-only"}

    with pytest.raises(anthropic.NotFoundError) as refused:
        _anthropic(arena, token).messages.create(
            model="chat-only", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert "not served through the Anthropic Messages API" in refused.value.message
    assert "the Chat Completions API" in refused.value.message
    assert billing_llm.billed() == []
    with pytest.raises(anthropic.AuthenticationError):
        _anthropic(arena, "not-a-token").messages.create(
            model="billing", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
