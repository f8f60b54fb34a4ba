"""How the proxy prices a request before sending it: the most the upstream can bill for it,
and the exact body that goes out. A chat completion first (`price_request`); the Responses,
embeddings and Anthropic Messages requests below it (`price_responses`, `price_embeddings`,
`price_messages`) follow the same rules in their own formats.

The bound holds for an upstream that bills as OpenAI does:
- prompt tokens: one token per byte of the whole JSON body sent (messages, tools,
  `response_format`, every other field: no tokenizer yields more than one token a byte of
  text, and the JSON escapes only add bytes), plus what a chat template adds around each
  message and tool and once per request; the prompt is billed once whatever `n` is;
- completion tokens: `max_tokens` for each of the `n` choices. The proxy always sends
  `max_tokens`, capped by the upstream's `max_completion_tokens`.
Anything this cannot bound is refused before a cent is reserved: content parts that are not
text (images, audio and files cost a fixed number of tokens whatever their bytes), audio
output, predicted outputs (rejected prediction tokens are billed beyond `max_tokens`), tiers
priced above the list price, hosted tools, and any parameter not listed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agents.credit import bound_cost_usd
from agents.models import Upstream

TEMPLATE_TOKENS_PER_MESSAGE = 16  # role markers and separators a chat template adds
TEMPLATE_TOKENS_PER_TOOL = 32  # the tools preamble and each function's header
TEMPLATE_TOKENS_PER_REQUEST = 64  # the reply's priming, a structured-output preamble
MAX_CHOICES = 16

# Parameters that change neither the prompt beyond its bytes nor the completion beyond
# `max_tokens` x `n`.
PRICED_PARAMETERS = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "n", "stream",
        "stream_options", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
        "presence_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs",
        "stop", "seed", "user", "tools", "tool_choice", "parallel_tool_calls", "functions",
        "function_call", "response_format", "service_tier", "store", "metadata",
        "reasoning_effort", "verbosity", "prompt_cache_key", "safety_identifier",
    }
)  # fmt: skip
LIST_PRICE_TIERS = frozenset({"auto", "default"})
MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal"}
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
TEXT_PARTS = frozenset({"text", "refusal"})
TOOL_TYPES = frozenset({"function", "custom"})


class Unpriceable(ValueError):
    """The request asks for something the proxy cannot bound the price of."""


@dataclass(frozen=True)
class PricedRequest:
    body: bytes  # exactly what is sent upstream
    stream: bool
    prompt_tokens_bound: int
    completion_tokens_bound: int
    reserved_usd: Decimal


def _positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Unpriceable(f"'{name}' must be a positive integer")
    return value


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise Unpriceable("'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise Unpriceable(f"messages[{index}] must be an object with a chat role")
        unknown = sorted(set(message) - MESSAGE_FIELDS)
        if unknown:
            raise Unpriceable(f"messages[{index}]: the proxy cannot price {unknown[0]!r}")
        _check_text_parts(message.get("content"), f"messages[{index}].content", TEXT_PARTS)


def price_request(body: dict[str, Any], upstream: Upstream) -> PricedRequest:
    """The body to send upstream and the most it can cost, or Unpriceable."""
    unknown = sorted(set(body) - PRICED_PARAMETERS)
    if unknown:
        raise Unpriceable(f"the proxy cannot price the parameter {unknown[0]!r}")
    _check_messages(body.get("messages"))
    tier = body.get("service_tier")
    if tier is not None and tier not in LIST_PRICE_TIERS:
        raise Unpriceable(f"service_tier {tier!r} is not supported (use 'auto' or 'default')")
    tools = body.get("tools") or []
    functions = body.get("functions") or []
    if not isinstance(tools, list) or not isinstance(functions, list):
        raise Unpriceable("'tools' and 'functions' must be lists")
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in TOOL_TYPES:
            raise Unpriceable("only function tools are supported by the proxy")
    if not isinstance(body.get("stream", False), bool):
        raise Unpriceable("'stream' must be true or false")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise Unpriceable("'stream_options' must be an object")

    choices = _positive_int(body, "n") or 1
    if choices > MAX_CHOICES:
        raise Unpriceable(f"'n' may be at most {MAX_CHOICES}")
    asked = [
        value
        for value in (
            _positive_int(body, "max_completion_tokens"),
            _positive_int(body, "max_tokens"),
        )
        if value is not None
    ]
    max_tokens = min([*asked, upstream.max_completion_tokens])

    stream = bool(body.get("stream"))
    outgoing = {key: value for key, value in body.items() if key != "max_completion_tokens"}
    outgoing.update(model=upstream.upstream_model, max_tokens=max_tokens)
    if stream:
        outgoing["stream_options"] = {"include_usage": True}
    # ASCII-escaped: a non-ASCII character counts 6 or 12 bytes, above its UTF-8 bytes (a
    # byte-level tokenizer can give one token per UTF-8 byte of CJK or emoji text).
    sent = json.dumps(outgoing, ensure_ascii=True).encode()
    return _chat_priced(
        upstream, sent, stream=stream, turns=len(body["messages"]),
        tools=len(tools) + len(functions), completion_bound=max_tokens * choices,
    )  # fmt: skip


def _chat_priced(
    upstream: Upstream,
    sent: bytes,
    *,
    stream: bool,
    turns: int,
    tools: int,
    completion_bound: int,
    preamble_tokens: int = 0,
) -> PricedRequest:
    """A chat-shaped call's bounds, whichever wire protocol it came in: every byte sent may be a
    token, plus the chat template's tokens per turn, per tool and per request (and a
    protocol's own tools preamble), and the most tokens it may write."""
    prompt_bound = (
        len(sent)
        + TEMPLATE_TOKENS_PER_MESSAGE * turns
        + TEMPLATE_TOKENS_PER_TOOL * tools
        + preamble_tokens
        + TEMPLATE_TOKENS_PER_REQUEST
    )
    return PricedRequest(
        body=sent,
        stream=stream,
        prompt_tokens_bound=prompt_bound,
        completion_tokens_bound=completion_bound,
        reserved_usd=bound_cost_usd(
            upstream, prompt_tokens=prompt_bound, completion_tokens=completion_bound
        ),
    )


# --- the other wire protocols -------------------------------------------------------------
# The same bound for each: one token per byte of the JSON body sent (ASCII-escaped), plus what
# a template adds per item and per request; the completion at the most the body allows. What a
# request could make the upstream bill beyond that is refused, with the reason.

MAX_EMBEDDING_INPUTS = 2048  # OpenAI's own limit on one embeddings call
EMBEDDING_TOKENS_PER_INPUT = 4  # the start and end markers an embedding model adds
# Anthropic's tool-use system prompt: ~350 tokens, that it adds when `tools` are given.
ANTHROPIC_TOOLS_PREAMBLE_TOKENS = 512

RESPONSES_PARAMETERS = frozenset(
    {
        "model", "input", "instructions", "max_output_tokens", "stream", "stream_options",
        "temperature", "top_p", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
        "text", "reasoning", "store", "metadata", "user", "service_tier", "truncation",
        "include", "prompt_cache_key", "safety_identifier",
    }
)  # fmt: skip
# Stateful parameters: the upstream would add what it stored to the prompt, which the body
# does not show, so no bound holds.
RESPONSES_STATEFUL = {
    "previous_response_id": "previous_response_id is not supported: the proxy prices the"
    " whole conversation from the request, so send it in 'input' (and 'store': false)",
    "conversation": "conversations are not supported: send the whole conversation in 'input'",
    "prompt": "stored prompt templates are not supported: send the prompt in 'input'",
    "background": "background responses are not supported: call it and wait, or stream",
}
RESPONSES_ROLES = frozenset({"user", "assistant", "system", "developer"})
RESPONSES_TEXT_PARTS = frozenset({"input_text", "output_text", "refusal", "text"})
RESPONSES_ITEMS = frozenset(
    {"message", "function_call", "function_call_output", "reasoning", "custom_tool_call",
     "custom_tool_call_output"}
)  # fmt: skip

EMBEDDINGS_PARAMETERS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})

MESSAGES_PARAMETERS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "tools", "tool_choice", "temperature",
        "top_p", "top_k", "stop_sequences", "stream", "metadata", "thinking", "service_tier",
    }
)  # fmt: skip
MESSAGES_BLOCKS = frozenset({"text", "tool_use", "tool_result", "thinking", "redacted_thinking"})
MESSAGES_SERVICE_TIERS = frozenset({"auto", "standard_only"})


def _sent(outgoing: dict[str, Any]) -> bytes:
    return json.dumps(outgoing, ensure_ascii=True).encode()


def _capped(asked: int | None, upstream: Upstream) -> int:
    return min(asked, upstream.max_completion_tokens) if asked else upstream.max_completion_tokens


def _check_text_parts(parts: Any, where: str, allowed: frozenset[str]) -> None:
    if parts is None or isinstance(parts, str):
        return
    if not isinstance(parts, list):
        raise Unpriceable(f"{where} must be a string or a list of parts")
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            raise Unpriceable(
                f"{where}: content of type {kind!r} is not supported by the proxy (it prices"
                " text only)"
            )


def price_responses(body: dict[str, Any], upstream: Upstream) -> PricedRequest:
    """An OpenAI Responses request: the body to send upstream and the most it can cost.
    Reasoning tokens are output tokens, within `max_output_tokens`, which the proxy always
    sends (capped by the upstream's `max_completion_tokens`)."""
    for name, why in RESPONSES_STATEFUL.items():
        if body.get(name) not in (None, False):
            raise Unpriceable(why)
    unknown = sorted(set(body) - RESPONSES_PARAMETERS)
    if unknown:
        raise Unpriceable(f"the proxy cannot price the parameter {unknown[0]!r}")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise Unpriceable("'input' must be a string or a non-empty list of items")
    for index, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind not in RESPONSES_ITEMS:
            raise Unpriceable(
                f"input[{index}]: items of type {kind!r} are not supported by the proxy"
                " (item references need stored responses; send the items themselves)"
            )
        if kind == "message":
            if item.get("role") not in RESPONSES_ROLES:
                raise Unpriceable(f"input[{index}] must be a message with a chat role")
            _check_text_parts(item.get("content"), f"input[{index}].content", RESPONSES_TEXT_PARTS)
        elif kind == "function_call_output":
            _check_text_parts(item.get("output"), f"input[{index}].output", RESPONSES_TEXT_PARTS)
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise Unpriceable("'tools' must be a list")
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in TOOL_TYPES:
            raise Unpriceable(
                "only function and custom tools are supported by the proxy (hosted tools bill"
                " beyond the tokens)"
            )
    tier = body.get("service_tier")
    if tier is not None and tier not in LIST_PRICE_TIERS:
        raise Unpriceable(f"service_tier {tier!r} is not supported (use 'auto' or 'default')")
    if not isinstance(body.get("stream", False), bool):
        raise Unpriceable("'stream' must be true or false")
    max_output = _capped(_positive_int(body, "max_output_tokens"), upstream)
    outgoing = {**body, "model": upstream.upstream_model, "max_output_tokens": max_output}
    sent = _sent(outgoing)
    return _chat_priced(
        upstream, sent, stream=bool(body.get("stream")),
        turns=len(items) + (1 if body.get("instructions") else 0), tools=len(tools),
        completion_bound=max_output,
    )  # fmt: skip


def _embedding_tokens_bound(one: Any) -> int:
    if isinstance(one, str):
        if not one:
            raise Unpriceable("'input' may not hold an empty string")
        # One token per byte at most; the escaped form is never shorter than the UTF-8.
        return len(json.dumps(one, ensure_ascii=True)) - 2
    if (
        isinstance(one, list)
        and one
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in one)
    ):
        return len(one)
    raise Unpriceable("'input' must be a string, a list of strings or a list of token lists")


def price_embeddings(body: dict[str, Any], upstream: Upstream) -> PricedRequest:
    """An OpenAI embeddings request: every input token at the embedding price."""
    unknown = sorted(set(body) - EMBEDDINGS_PARAMETERS)
    if unknown:
        raise Unpriceable(f"the proxy cannot price the parameter {unknown[0]!r}")
    given = body.get("input")
    tokens_given = isinstance(given, list) and given and all(isinstance(t, int) for t in given)
    inputs = [given] if isinstance(given, str) or tokens_given else given
    if not isinstance(inputs, list) or not inputs:
        raise Unpriceable("'input' must be a string or a non-empty list")
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise Unpriceable(f"at most {MAX_EMBEDDING_INPUTS} inputs in one embeddings call")
    prompt_bound = sum(_embedding_tokens_bound(one) + EMBEDDING_TOKENS_PER_INPUT for one in inputs)
    _positive_int(body, "dimensions")
    sent = _sent({**body, "model": upstream.upstream_model})
    return PricedRequest(
        body=sent,
        stream=False,
        prompt_tokens_bound=prompt_bound,
        completion_tokens_bound=0,
        reserved_usd=bound_cost_usd(
            upstream, prompt_tokens=prompt_bound, completion_tokens=0, embedding=True
        ),
    )


def _check_cache_control(block: dict[str, Any], where: str) -> None:
    control = block.get("cache_control")
    if control is None:
        return
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise Unpriceable(f"{where}: cache_control must be {{'type': 'ephemeral'}}")
    if control.get("ttl", "5m") != "5m":
        raise Unpriceable(
            f"{where}: only 5-minute cache writes are priced here (an hour's cost more)"
        )


def _check_blocks(content: Any, where: str, allowed: frozenset[str]) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Unpriceable(f"{where} must be a string or a list of content blocks")
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            raise Unpriceable(
                f"{where}[{index}]: blocks of type {kind!r} are not supported by the proxy (it"
                " prices text, tool use and thinking)"
            )
        assert isinstance(block, dict)
        _check_cache_control(block, f"{where}[{index}]")
        if kind == "tool_result":
            _check_blocks(
                block.get("content", ""), f"{where}[{index}].content", frozenset({"text"})
            )


def price_messages(body: dict[str, Any], upstream: Upstream) -> PricedRequest:
    """An Anthropic Messages request. `max_tokens` is required, as Anthropic requires it, and
    capped by the upstream's `max_completion_tokens`; thinking is output within it. Every
    prompt token is bounded at the dearest prompt rate: the proxy cannot know which the
    upstream will read from its cache and which it will write there."""
    unknown = sorted(set(body) - MESSAGES_PARAMETERS)
    if unknown:
        raise Unpriceable(f"the proxy cannot price the parameter {unknown[0]!r}")
    if body.get("max_tokens") is None:
        raise Unpriceable("max_tokens: Field required (the Messages API requires it)")
    max_tokens = _capped(_positive_int(body, "max_tokens"), upstream)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Unpriceable("'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise Unpriceable(f"messages[{index}] must have the role 'user' or 'assistant'")
        unknown_fields = sorted(set(message) - {"role", "content"})
        if unknown_fields:
            raise Unpriceable(f"messages[{index}]: the proxy cannot price {unknown_fields[0]!r}")
        _check_blocks(message.get("content"), f"messages[{index}].content", MESSAGES_BLOCKS)
    system = body.get("system")
    if system is not None:
        _check_blocks(system, "system", frozenset({"text"}))
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise Unpriceable("'tools' must be a list")
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            raise Unpriceable(
                "only custom tools (name, description, input_schema) are supported by the"
                " proxy: Anthropic's own tools add prompts and fees the body does not show"
            )
        _check_cache_control(tool, f"tools[{index}]")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget >= max_tokens:
            raise Unpriceable(
                f"thinking.budget_tokens must be an integer below max_tokens (at most"
                f" {max_tokens} here)"
            )
    tier = body.get("service_tier")
    if tier is not None and tier not in MESSAGES_SERVICE_TIERS:
        raise Unpriceable(f"service_tier {tier!r} is not supported")
    if not isinstance(body.get("stream", False), bool):
        raise Unpriceable("'stream' must be true or false")
    sent = _sent({**body, "model": upstream.upstream_model, "max_tokens": max_tokens})
    return _chat_priced(
        upstream, sent, stream=bool(body.get("stream")),
        turns=len(messages) + (1 if system else 0), tools=len(tools),
        completion_bound=max_tokens,
        preamble_tokens=ANTHROPIC_TOOLS_PREAMBLE_TOKENS if tools else 0,
    )  # fmt: skip
