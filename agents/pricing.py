"""How the proxy prices a chat completion request before sending it: the most the upstream
can bill for it, and the exact body that goes out.

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

from agents.credit import cost_usd
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
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise Unpriceable(f"messages[{index}].content must be a string or a list of parts")
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in TEXT_PARTS:
                raise Unpriceable(
                    f"messages[{index}]: content of type {kind!r} is not supported by the"
                    " proxy (it prices text only)"
                )


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
    prompt_bound = (
        len(sent)
        + TEMPLATE_TOKENS_PER_MESSAGE * len(body["messages"])
        + TEMPLATE_TOKENS_PER_TOOL * (len(tools) + len(functions))
        + TEMPLATE_TOKENS_PER_REQUEST
    )
    completion_bound = max_tokens * choices
    return PricedRequest(
        body=sent,
        stream=stream,
        prompt_tokens_bound=prompt_bound,
        completion_tokens_bound=completion_bound,
        reserved_usd=cost_usd(
            upstream, prompt_tokens=prompt_bound, completion_tokens=completion_bound
        ),
    )
