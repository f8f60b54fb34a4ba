"""A fake OpenAI-compatible upstream that bills like a real one.

The proxy's tests and `bench/proxy_billing.py` need an upstream whose bill can be compared
with what the proxy charged. This one bills every request it receives, whether or not the
caller reads the answer, and reports usage as OpenAI does:

- prompt tokens are counted over the whole request body (messages, tools, `response_format`,
  every other field), one token per word or punctuation mark (more than a BPE tokenizer
  gives, never more than one a byte), plus 3 per message and 3 to prime the reply;
- image and audio parts cost what OpenAI charges for them (765 and 1,000 tokens), whatever
  their size in bytes; rejected predicted-output tokens are billed as completion tokens;
- each of the `n` choices generates `max_tokens` tokens (or `DEFAULT_COMPLETION_TOKENS` when
  the caller sets none), and completion tokens are summed over the choices;
- a stream carries usage in its last chunk only when `stream_options.include_usage` asks;
- `service_tier: "priority"` costs twice the list price, `"flex"` half.

The other routes bill as their real services do:

- `POST /v1/responses` (OpenAI Responses): prompt tokens over the whole body plus 3 per input
  item (a string `input` is one item) and 3; `max_output_tokens` (or
  `DEFAULT_COMPLETION_TOKENS`) output tokens. With `reasoning`, a quarter of the output tokens
  are reasoning tokens, counted in `output_tokens` as OpenAI counts them; with
  `prompt_cache_key`, half the prompt tokens are cached, counted in `input_tokens` as OpenAI
  counts them. A response that sets `max_output_tokens` runs into it (`status: "incomplete"`);
  one that sets none completes. Function `tools` add a call of the first one;
- `POST /v1/embeddings`: one token per word of each string input, or per token of each token
  list, and no completion tokens; `encoding_format: "base64"` answers little-endian float32s;
- `POST /v1/messages` (Anthropic Messages): prompt tokens over the whole body plus 3 per
  message and 3; `max_tokens` (which Anthropic requires) completion tokens. When any
  `cache_control` appears in the body, a quarter of the prompt is written to the cache and a
  quarter read from it; Anthropic's `input_tokens` leaves both out, the `Bill` keeps the total.

Models: `billing` answers at once; `billing-slow` waits `SLOW_S` before answering, on every
route (a client that hangs up meanwhile is billed anyway, as a real upstream bills it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agents.harness.threaded_server import ThreadedServer, free_port

DEFAULT_COMPLETION_TOKENS = 16_000
SLOW_S = 1.5
IMAGE_TOKENS = 765
AUDIO_TOKENS = 1_000
TIER_PRICE = {"priority": Decimal(2), "flex": Decimal("0.5")}
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class Bill:
    model: str
    prompt_tokens: int
    completion_tokens: int
    price_factor: Decimal  # the service tier's multiple of the list price
    embedding: bool = False  # an embeddings request
    cached_prompt_tokens: int = 0  # of `prompt_tokens`, those read from the prompt cache
    cache_write_tokens: int = 0  # of `prompt_tokens`, those written to it (Anthropic)


def _media_tokens(body: dict[str, Any]) -> int:
    tokens = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            tokens += IMAGE_TOKENS if kind == "image_url" else 0
            tokens += AUDIO_TOKENS if kind in ("input_audio", "file") else 0
    return tokens


def bill_for(body: dict[str, Any]) -> Bill:
    messages = body.get("messages") or []
    prompt = count_tokens(json.dumps(body)) + 3 * len(messages) + 3 + _media_tokens(body)
    n = int(body.get("n") or 1)
    per_choice = int(
        body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_COMPLETION_TOKENS
    )
    prediction = body.get("prediction") or {}
    rejected = count_tokens(json.dumps(prediction.get("content", ""))) if prediction else 0
    return Bill(
        model=str(body.get("model")),
        prompt_tokens=prompt,
        completion_tokens=n * per_choice + rejected,
        price_factor=TIER_PRICE.get(str(body.get("service_tier")), Decimal(1)),
    )


def bill_for_responses(body: dict[str, Any]) -> Bill:
    items = body.get("input")
    n_items = 1 if isinstance(items, str) else len(items or [])
    prompt = count_tokens(json.dumps(body)) + 3 * n_items + 3
    return Bill(
        model=str(body.get("model")),
        prompt_tokens=prompt,
        completion_tokens=int(body.get("max_output_tokens") or DEFAULT_COMPLETION_TOKENS),
        price_factor=TIER_PRICE.get(str(body.get("service_tier")), Decimal(1)),
        cached_prompt_tokens=prompt // 2 if body.get("prompt_cache_key") else 0,
    )


def _reasoning_tokens(body: dict[str, Any], bill: Bill) -> int:
    return bill.completion_tokens // 4 if body.get("reasoning") else 0


def _embedding_inputs(body: dict[str, Any]) -> list[str | list[int]]:
    given = body.get("input")
    if isinstance(given, str):
        return [given]
    if given and all(isinstance(token, int) for token in given):
        return [list(given)]  # a single input given as tokens
    return list(given or [])


def bill_for_embeddings(body: dict[str, Any]) -> Bill:
    inputs = _embedding_inputs(body)
    prompt = sum(count_tokens(x) if isinstance(x, str) else len(x) for x in inputs)
    return Bill(
        model=str(body.get("model")),
        prompt_tokens=prompt,
        completion_tokens=0,
        price_factor=Decimal(1),
        embedding=True,
    )


def _mentions_cache_control(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(map(_mentions_cache_control, value.values()))
    if isinstance(value, list):
        return any(map(_mentions_cache_control, value))
    return False


def bill_for_messages(body: dict[str, Any]) -> Bill:
    prompt = count_tokens(json.dumps(body)) + 3 * len(body.get("messages") or []) + 3
    cached = prompt // 4 if _mentions_cache_control(body) else 0
    return Bill(
        model=str(body.get("model")),
        prompt_tokens=prompt,  # Anthropic's input_tokens + both cache counts
        completion_tokens=int(body["max_tokens"]),
        price_factor=Decimal(1),
        cached_prompt_tokens=cached,
        cache_write_tokens=cached,
    )


@dataclass
class BillingLLM:
    host: str = "127.0.0.1"
    port: int = 0
    bills: list[Bill] = field(default_factory=list)
    chunk_delay_s: float = 0.01  # between stream chunks, so a client can hang up mid-stream
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: ThreadedServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> None:
        self.port = self.port or free_port(self.host)
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
            ]
        )
        self._running = ThreadedServer(
            app, host=self.host, port=self.port, what="billing LLM server"
        )
        self._running.start()

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()

    def reset(self) -> None:
        with self._lock:
            self.bills.clear()

    def billed(self) -> list[Bill]:
        with self._lock:
            return list(self.bills)

    async def _chat(self, request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        bill = bill_for(body)
        with self._lock:
            self.bills.append(bill)  # billed on receipt: hanging up later saves nothing
        if body.get("model") == "billing-slow":
            await asyncio.sleep(SLOW_S)
        n = int(body.get("n") or 1)
        per_choice = bill.completion_tokens // n
        usage = {
            "prompt_tokens": bill.prompt_tokens,
            "completion_tokens": bill.completion_tokens,
            "total_tokens": bill.prompt_tokens + bill.completion_tokens,
        }
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "chatcmpl-billing",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": i,
                            "message": {"role": "assistant", "content": "w " * per_choice},
                            "finish_reason": "length",
                        }
                        for i in range(n)
                    ],
                    "usage": usage,
                }
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def chunks() -> AsyncIterator[str]:
            for _ in range(min(per_choice, 64)):  # a few chunks carry the whole text
                for i in range(n):
                    yield _sse(body, [{"index": i, "delta": {"content": "w " * (per_choice // 64 or 1)}, "finish_reason": None}])  # fmt: skip
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            yield _sse(body, [{"index": i, "delta": {}, "finish_reason": "length"} for i in range(n)])  # fmt: skip
            if include_usage:
                yield _sse(body, [], usage=usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _bill(self, bill: Bill) -> None:
        with self._lock:
            self.bills.append(bill)  # billed on receipt: hanging up later saves nothing
        if bill.model == "billing-slow":
            await asyncio.sleep(SLOW_S)

    async def _responses(self, request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        bill = bill_for_responses(body)
        await self._bill(bill)
        reasoning = _reasoning_tokens(body, bill)
        text = "w " * (bill.completion_tokens - reasoning)
        tool = next((t for t in body.get("tools") or [] if t.get("type") == "function"), None)
        incomplete = body.get("max_output_tokens") is not None
        status = "incomplete" if incomplete else "completed"
        message = {"id": "msg_billing", "type": "message", "status": status, "role": "assistant", "content": [_output_text(text)]}  # fmt: skip
        output: list[dict[str, Any]] = [message]
        call = None
        if tool is not None:
            call = {"id": "fc_billing", "type": "function_call", "status": "completed", "arguments": "{}", "call_id": "call_billing", "name": tool["name"]}  # fmt: skip
            output.append(call)
        usage = {
            "input_tokens": bill.prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": bill.cached_prompt_tokens,
                "cache_write_tokens": 0,
            },
            "output_tokens": bill.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": bill.prompt_tokens + bill.completion_tokens,
        }
        done = _response(body, status=status, output=output, usage=usage)
        if not body.get("stream"):
            return JSONResponse(done)

        async def events() -> AsyncIterator[dict[str, Any]]:
            started = _response(body, status="in_progress", output=[], usage=None)
            yield {"type": "response.created", "response": started}
            yield {"type": "response.in_progress", "response": started}
            at = {"item_id": "msg_billing", "output_index": 0}
            yield {"type": "response.output_item.added", "output_index": 0, "item": {**message, "status": "in_progress", "content": []}}  # fmt: skip
            yield {"type": "response.content_part.added", **at, "content_index": 0, "part": _output_text("")}  # fmt: skip
            for piece in _pieces(text):
                yield {"type": "response.output_text.delta", **at, "content_index": 0, "delta": piece, "logprobs": []}  # fmt: skip
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            yield {"type": "response.output_text.done", **at, "content_index": 0, "text": text, "logprobs": []}  # fmt: skip
            yield {"type": "response.content_part.done", **at, "content_index": 0, "part": _output_text(text)}  # fmt: skip
            yield {"type": "response.output_item.done", "output_index": 0, "item": message}
            if call is not None:
                at = {"item_id": "fc_billing", "output_index": 1}
                yield {"type": "response.output_item.added", "output_index": 1, "item": {**call, "status": "in_progress", "arguments": ""}}  # fmt: skip
                yield {"type": "response.function_call_arguments.delta", **at, "delta": "{}"}
                yield {"type": "response.function_call_arguments.done", **at, "arguments": "{}"}
                yield {"type": "response.output_item.done", "output_index": 1, "item": call}
            yield {"type": f"response.{status}", "response": done}

        async def chunks() -> AsyncIterator[str]:
            sequence_number = 0
            async for event in events():
                yield _named_sse({**event, "sequence_number": sequence_number})
                sequence_number += 1

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def _embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        bill = bill_for_embeddings(body)
        await self._bill(bill)
        dimensions = int(body.get("dimensions") or 8)
        data = []
        for index in range(len(_embedding_inputs(body))):
            vector = [(index + j) % 8 / 8 for j in range(dimensions)]  # exact in float32
            embedding: list[float] | str = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        usage = {"prompt_tokens": bill.prompt_tokens, "total_tokens": bill.prompt_tokens}
        return JSONResponse(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    async def _messages(self, request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        if body.get("max_tokens") is None:  # rejected before any token is read: not billed
            error = {"type": "invalid_request_error", "message": "max_tokens: Field required"}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        bill = bill_for_messages(body)
        await self._bill(bill)
        text = "w " * bill.completion_tokens
        tools = body.get("tools") or []
        uncached = bill.prompt_tokens - bill.cached_prompt_tokens - bill.cache_write_tokens
        usage = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": bill.cache_write_tokens,
            "cache_read_input_tokens": bill.cached_prompt_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": bill.cache_write_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": bill.completion_tokens,
            "service_tier": "standard",
        }
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if tools:
            content.append({"type": "tool_use", "id": "toolu_billing", "name": tools[0]["name"], "input": {}})  # fmt: skip
        message = {
            "id": "msg_billing",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return JSONResponse(message)

        async def events() -> AsyncIterator[dict[str, Any]]:
            started = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}  # fmt: skip
            yield {"type": "message_start", "message": started}
            yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}  # fmt: skip
            yield {"type": "ping"}
            for piece in _pieces(text):
                yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}  # fmt: skip
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            yield {"type": "content_block_stop", "index": 0}
            if tools:
                yield {"type": "content_block_start", "index": 1, "content_block": content[1]}
                for partial_json in ("", "{}"):
                    yield {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": partial_json}}  # fmt: skip
                yield {"type": "content_block_stop", "index": 1}
            yield {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}, "usage": {"output_tokens": bill.completion_tokens}}  # fmt: skip
            yield {"type": "message_stop"}

        async def chunks() -> AsyncIterator[str]:
            async for event in events():
                yield _named_sse(event)

        return StreamingResponse(chunks(), media_type="text/event-stream")


def _sse(body: dict[str, Any], choices: list[dict[str, Any]], usage: Any = None) -> str:
    chunk = {
        "id": "chatcmpl-billing",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": choices,
        "usage": usage,
    }
    return f"data: {json.dumps(chunk)}\n\n"


def _named_sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


def _pieces(text: str, most: int = 64) -> list[str]:
    """`text`, a few words at a time, in at most `most` pieces that add up to all of it."""
    words = text.split(" ")[:-1]  # "w " * n has n words, each followed by a space
    k = min(len(words), most)
    return ["w " * ((i + 1) * len(words) // k - i * len(words) // k) for i in range(k)]


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _response(
    body: dict[str, Any], *, status: str, output: list[dict[str, Any]], usage: Any
) -> dict[str, Any]:
    """A Responses API `response` object, echoing the request's settings as OpenAI does."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": "resp_billing",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier") or "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }
