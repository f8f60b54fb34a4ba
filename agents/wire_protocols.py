"""The wire protocols the proxy speaks, each in its own format, with the same metering.

- `chat`: OpenAI Chat Completions (`/chat/completions`);
- `responses`: OpenAI Responses (`/responses`), what the Codex CLI and the Agents SDK call;
- `embeddings`: OpenAI embeddings (`/embeddings`);
- `messages`: Anthropic Messages (`/messages`), what Claude Code-style scaffolds call.

A protocol says where the upstream takes the call (its path under the upstream's base URL),
how a request is priced (`agents.pricing`), which error shape the caller's SDK reads, what the
upstream reports it billed (`Usage`, from a whole reply or from the events of a stream), where
the model's name is shown (the upstream's own stays behind the proxy), and what of the call
goes into the agent's trajectory: the request as chat messages, and the reply's text and tool
calls. The proxy (`agents.proxy`) does the rest the same way for all four.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from django.http import HttpRequest, JsonResponse

from agents.credit import Usage
from agents.models import Upstream
from agents.pricing import (
    PricedRequest,
    price_embeddings,
    price_messages,
    price_request,
    price_responses,
)
from agents.trajectory import ReplyCollector

ANTHROPIC_VERSION = "2023-06-01"  # sent when the caller names none


def _count(value: Any) -> int | None:
    """A token count as reported: a non-negative integer, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _field(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _text_of(content: Any) -> Any:
    """Content as text: a string as it is, a list of parts as their text (others named)."""
    if not isinstance(content, list):
        return content
    pieces = []
    for part in content[:64]:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        else:
            pieces.append(f"[{part.get('type', 'part') if isinstance(part, dict) else 'part'}]")
    return "".join(pieces)


class UsageTracker:
    """What the upstream reported it billed, from its whole reply or its stream's events."""

    def __init__(self) -> None:
        self.usage: Usage | None = None

    def see_reply(self, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def see_event(self, data: dict[str, Any]) -> None:
        self.see_reply(data)


class WireProtocol:
    name: ClassVar[str]
    path: ClassVar[str]
    what: ClassVar[str]  # in words, for the caller
    price: Callable[[dict[str, Any], Upstream], PricedRequest]

    def tracker(self) -> UsageTracker:
        raise NotImplementedError

    def error(self, status: int, message: str, kind: str, code: str | None = None) -> JsonResponse:
        """An error in the shape the caller's SDK reads (OpenAI's, unless overridden)."""
        return JsonResponse(
            {"error": {"message": message, "type": kind, "code": code}}, status=status
        )

    def token(self, request: HttpRequest) -> str | None:
        header = request.headers.get("Authorization", "")
        return header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None

    def upstream_headers(self, upstream: Upstream, request: HttpRequest) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if upstream.api_key:
            headers["Authorization"] = f"Bearer {upstream.api_key}"
        return headers

    def rename(self, data: dict[str, Any], name: str) -> None:
        """Show `name` where the reply names its model."""
        if "model" in data:
            data["model"] = name

    def rename_event(self, data: dict[str, Any], name: str) -> None:
        self.rename(data, name)

    def collect(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        """The text and tool calls of a whole reply, for the trajectory."""

    def collect_event(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        """The text and tool calls of one stream event."""

    def chat_messages(self, body: dict[str, Any]) -> list[Any] | None:
        """The request as chat messages, for the trajectory (None: the body's `messages`)."""
        return None


# --- OpenAI Chat Completions -----------------------------------------------------------------
class _ChatUsage(UsageTracker):
    def see_reply(self, data: dict[str, Any]) -> None:
        usage = data.get("usage")
        prompt = _count(_field(usage, "prompt_tokens"))
        completion = _count(_field(usage, "completion_tokens"))
        if prompt is None or completion is None:
            return
        cached = _count(_field(usage, "prompt_tokens_details", "cached_tokens")) or 0
        self.usage = Usage(prompt, completion, cached_prompt=cached)


class Chat(WireProtocol):
    name, path, what = "chat", "/chat/completions", "the Chat Completions API"
    price = staticmethod(price_request)

    def tracker(self) -> UsageTracker:
        return _ChatUsage()

    def collect(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        reply.add_completion(data)

    def collect_event(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        reply.add_chunk(data)


# --- OpenAI Responses ------------------------------------------------------------------------
class _ResponsesUsage(UsageTracker):
    def see_reply(self, data: dict[str, Any]) -> None:
        self._from(data.get("usage"))

    def see_event(self, data: dict[str, Any]) -> None:
        # response.completed, .incomplete and .failed carry the whole response, usage and all.
        if isinstance(data.get("response"), dict):
            self._from(data["response"].get("usage"))

    def _from(self, usage: Any) -> None:
        prompt = _count(_field(usage, "input_tokens"))
        output = _count(_field(usage, "output_tokens"))
        if prompt is None or output is None:
            return
        reasoning = _count(_field(usage, "output_tokens_details", "reasoning_tokens")) or 0
        # OpenAI counts reasoning inside output_tokens; an upstream that counts it apart
        # (reasoning above the output) is billed both.
        completion = output if reasoning <= output else output + reasoning
        cached = _count(_field(usage, "input_tokens_details", "cached_tokens")) or 0
        self.usage = Usage(prompt, completion, cached_prompt=cached)


class Responses(WireProtocol):
    name, path, what = "responses", "/responses", "the Responses API"
    price = staticmethod(price_responses)

    def tracker(self) -> UsageTracker:
        return _ResponsesUsage()

    def rename_event(self, data: dict[str, Any], name: str) -> None:
        if isinstance(data.get("response"), dict):
            self.rename(data["response"], name)

    def collect(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        output = data.get("output")
        for item in output[:64] if isinstance(output, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                reply.add_text(_text_of(item.get("content")))
            elif item.get("type") in ("function_call", "custom_tool_call"):
                arguments = item.get("arguments", item.get("input"))
                reply.add_tool_piece(
                    len(reply.tool_calls), id=item.get("call_id"), name=item.get("name"),
                    arguments=arguments,
                )  # fmt: skip

    def collect_event(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        kind, index = data.get("type"), data.get("output_index")
        if kind == "response.output_text.delta":
            reply.add_text(data.get("delta"))
        elif kind == "response.output_item.added":
            item = data.get("item")
            if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
                reply.add_tool_piece(index, id=item.get("call_id"), name=item.get("name"))
        elif kind in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            reply.add_tool_piece(index, arguments=data.get("delta"))

    def chat_messages(self, body: dict[str, Any]) -> list[Any] | None:
        messages: list[Any] = []
        if isinstance(body.get("instructions"), str):
            messages.append({"role": "system", "content": body["instructions"]})
        given = body.get("input")
        items = [{"role": "user", "content": given}] if isinstance(given, str) else given
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type", "message")
            if kind == "message":
                messages.append(
                    {"role": item.get("role"), "content": _text_of(item.get("content"))}
                )
            elif kind in ("function_call", "custom_tool_call"):
                call = {
                    "name": item.get("name"),
                    "arguments": item.get("arguments", item.get("input")),
                }
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            elif kind in ("function_call_output", "custom_tool_call_output"):
                messages.append({"role": "tool", "content": _text_of(item.get("output"))})
            else:
                messages.append({"role": "item", "content": f"[{kind}]"})
        return messages


# --- OpenAI embeddings -----------------------------------------------------------------------
class _EmbeddingsUsage(UsageTracker):
    def see_reply(self, data: dict[str, Any]) -> None:
        prompt = _count(_field(data, "usage", "prompt_tokens"))
        if prompt is not None:
            self.usage = Usage(prompt, 0, embedding=True)


class Embeddings(WireProtocol):
    name, path, what = "embeddings", "/embeddings", "the embeddings API"
    price = staticmethod(price_embeddings)

    def tracker(self) -> UsageTracker:
        return _EmbeddingsUsage()

    def collect(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        vectors = data.get("data")
        reply.add_text(f"[{len(vectors) if isinstance(vectors, list) else 0} embeddings]")

    def chat_messages(self, body: dict[str, Any]) -> list[Any] | None:
        given = body.get("input")
        inputs = (
            given
            if isinstance(given, list) and given and not isinstance(given[0], int)
            else [given]
        )
        return [
            {"role": "input", "content": one if isinstance(one, str) else f"[{len(one)} tokens]"}
            for one in inputs
            if isinstance(one, str | list)
        ]


# --- Anthropic Messages ----------------------------------------------------------------------
ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


class _MessagesUsage(UsageTracker):
    """Anthropic reports the input (and cache) tokens when a message starts and the output
    tokens when it ends (`message_delta`, cumulative): a stream cut before its end has no
    output count, so it bills as one with no usage (the reservation)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, Any] = {}

    def see_reply(self, data: dict[str, Any]) -> None:
        self._from(data.get("usage"), {})

    def see_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start":
            usage = _field(data, "message", "usage")
            self.started = usage if isinstance(usage, dict) else {}
        elif kind == "message_delta":
            self._from(data.get("usage"), self.started)

    def _from(self, usage: Any, started: dict[str, Any]) -> None:
        if not isinstance(usage, dict):
            return

        def latest(key: str) -> int | None:
            return _count(usage[key]) if usage.get(key) is not None else _count(started.get(key))

        plain, output = latest("input_tokens"), latest("output_tokens")
        if plain is None or output is None:
            return
        written = latest("cache_creation_input_tokens") or 0
        read = latest("cache_read_input_tokens") or 0
        # Anthropic's input_tokens leaves out both cache counts; Usage.prompt holds them all.
        self.usage = Usage(plain + written + read, output, cached_prompt=read, cache_write=written)


class Messages(WireProtocol):
    name, path, what = "messages", "/messages", "the Anthropic Messages API"
    price = staticmethod(price_messages)

    def tracker(self) -> UsageTracker:
        return _MessagesUsage()

    def error(self, status: int, message: str, kind: str, code: str | None = None) -> JsonResponse:
        error_type = ANTHROPIC_ERRORS.get(status, "api_error")
        return JsonResponse(
            {"type": "error", "error": {"type": error_type, "message": message}}, status=status
        )

    def token(self, request: HttpRequest) -> str | None:
        key = request.headers.get("x-api-key", "").strip()
        return key or super().token(request)

    def upstream_headers(self, upstream: Upstream, request: HttpRequest) -> dict[str, str]:
        version = request.headers.get("anthropic-version", "")
        headers = {
            "Content-Type": "application/json",
            # A date, as Anthropic names its versions; anything else is not passed on.
            "anthropic-version": version if _is_version(version) else ANTHROPIC_VERSION,
        }
        if upstream.api_key:
            headers["x-api-key"] = upstream.api_key
        return headers

    def rename_event(self, data: dict[str, Any], name: str) -> None:
        if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
            self.rename(data["message"], name)

    def collect(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        content = data.get("content")
        for block in content[:64] if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                reply.add_text(block.get("text"))
            elif block.get("type") == "tool_use":
                reply.add_tool_piece(
                    len(reply.tool_calls), id=block.get("id"), name=block.get("name"),
                    arguments=json.dumps(block.get("input"))[:16_000],
                )  # fmt: skip

    def collect_event(self, reply: ReplyCollector, data: dict[str, Any]) -> None:
        kind, index = data.get("type"), data.get("index")
        if kind == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                reply.add_tool_piece(index, id=block.get("id"), name=block.get("name"))
        elif kind == "content_block_delta":
            delta = data.get("delta")
            if not isinstance(delta, dict):
                return
            if delta.get("type") == "text_delta":
                reply.add_text(delta.get("text"))
            elif delta.get("type") == "input_json_delta":
                reply.add_tool_piece(index, arguments=delta.get("partial_json"))

    def chat_messages(self, body: dict[str, Any]) -> list[Any] | None:
        messages: list[Any] = []
        if body.get("system") is not None:
            messages.append({"role": "system", "content": _text_of(body["system"])})
        given = body.get("messages")
        for message in given if isinstance(given, list) else []:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            calls = [
                {"name": b.get("name"), "arguments": b.get("input")}
                for b in blocks[:64]
                if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
            entry: dict[str, Any] = {"role": message.get("role"), "content": _text_of(content)}
            if calls:
                entry["tool_calls"] = calls
            messages.append(entry)
        return messages


def _is_version(value: str) -> bool:
    return len(value) == 10 and value[4] == value[7] == "-" and value.replace("-", "").isdigit()


PROTOCOLS: dict[str, WireProtocol] = {
    protocol.name: protocol for protocol in (Chat(), Responses(), Embeddings(), Messages())
}
