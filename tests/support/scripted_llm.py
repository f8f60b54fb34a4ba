"""A real OpenAI-compatible HTTP server whose "models" answer with scripted text.

The tiny models cannot be made to write a `<script>` tag or their own name on demand, so the
tests that check how the arena treats hostile or revealing answers use this server instead.
It speaks the same streaming protocol (SSE chunks, finish_reason, [DONE]) as `transformers
serve` and vLLM, so the arena's code path is the production one.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agents.harness.threaded_server import ThreadedServer, free_port


@dataclass
class Script:
    text: str
    chunk_chars: int = 4
    delay_s: float = 0.01
    fail_status: int | None = None  # answer with this HTTP status instead of text
    hang_s: float = 0.0  # wait this long before the first chunk (for timeouts)
    # After this many characters of text, drop the connection as a crashing server does
    # (no final chunk, no [DONE]: the client sees an incomplete chunked body).
    cut_after_chars: int | None = None
    # After this many characters of text, send a chunk that is not JSON.
    garbage_after_chars: int | None = None
    finish_reason: str | None = "stop"  # None: the last chunk carries no finish reason
    # Answer with the text of the first key found in the request's messages instead of
    # `text` (a judge that rules differently on different prompts).
    when_asked: dict[str, str] = field(default_factory=dict)
    # Otherwise answer these in turn, one a request, instead of `text` (a judge asked several
    # times); with concurrent requests the order is the server's arrival order.
    replies: tuple[str, ...] = ()
    _answered: int = 0

    def reply_to(self, messages: list[dict]) -> str:
        asked = "\n".join(str(message.get("content", "")) for message in messages)
        asked_for = next((reply for key, reply in self.when_asked.items() if key in asked), None)
        if asked_for is not None:
            return asked_for
        if not self.replies:
            return self.text
        reply = self.replies[self._answered % len(self.replies)]
        self._answered += 1
        return reply


@dataclass
class ScriptedLLM:
    scripts: dict[str, Script] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    _running: ThreadedServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> None:
        self.port = self.port or free_port(self.host)
        app = Starlette(
            routes=[
                Route("/health", self._health),
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )
        self._running = ThreadedServer(
            app, host=self.host, port=self.port, what="scripted LLM server"
        )
        self._running.start()

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.scripts]}
        )

    async def _chat(self, request: Request) -> JSONResponse | StreamingResponse:
        body = await request.json()
        script = self.scripts.get(body.get("model", ""))
        if script is None:
            return JSONResponse({"error": {"message": "model not found"}}, status_code=404)
        if script.fail_status is not None:
            return JSONResponse(
                {"error": {"message": "scripted failure"}}, status_code=script.fail_status
            )
        model = body["model"]
        text = script.reply_to(body.get("messages", []))

        async def chunks():
            if script.hang_s:
                await asyncio.sleep(script.hang_s)
            for start in range(0, len(text), script.chunk_chars):
                if script.cut_after_chars is not None and start >= script.cut_after_chars:
                    raise ConnectionCut
                if script.garbage_after_chars is not None and start >= script.garbage_after_chars:
                    yield "data: {this is not json\n\n"
                piece = text[start : start + script.chunk_chars]
                yield _sse(model, {"content": piece}, None)
                await asyncio.sleep(script.delay_s)
            yield _sse(model, {}, script.finish_reason)
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")


class ConnectionCut(Exception):
    """Raised inside a streaming response: uvicorn then closes the connection mid-body."""


def _sse(model: str, delta: dict[str, str], finish_reason: str | None) -> str:
    chunk = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(chunk)}\n\n"
