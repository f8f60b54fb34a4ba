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

Models: `billing` answers at once; `billing-slow` waits `SLOW_S` before answering (a client
that hangs up meanwhile is billed anyway, as a real upstream bills it).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
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
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
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

        async def chunks():
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
