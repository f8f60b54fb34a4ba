"""The metered LLM API proxy: OpenAI-compatible `/proxy/v1/chat/completions` and `/models`.

Agents never hold an upstream key: they call this with their proxy token; the proxy adds the
key on the way out. Each call first reserves its worst-case cost — the prompt counted as one
token per byte (no tokenizer yields more) plus `max_tokens`, which the proxy caps and always
sends — then settles on the usage the upstream reports. Streamed calls ask the upstream for
usage in the last chunk; if none comes (a client that hung up, an upstream without usage),
the completion is counted as one token per streamed chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx2
from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agents.models import Agent, Upstream
from agents.selectors import agent_for_token, upstreams_active
from agents.services import CreditExhausted, cost_usd, credit_reserve, credit_settle, proxy_call_log

TEMPLATE_TOKENS_PER_MESSAGE = 16  # role markers and separators a chat template adds
UPSTREAM_TIMEOUT_S = 600.0


def _error(status: int, message: str, kind: str, code: str | None = None) -> JsonResponse:
    return JsonResponse({"error": {"message": message, "type": kind, "code": code}}, status=status)


async def _authenticate(request: HttpRequest) -> Agent | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return await sync_to_async(agent_for_token)(
        header.removeprefix("Bearer ").strip(), kind="proxy"
    )


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        return _error(405, "use GET", "invalid_request_error")
    if await _authenticate(request) is None:
        return _error(
            401, "missing or invalid proxy token", "authentication_error", "invalid_api_key"
        )
    listed = await sync_to_async(upstreams_active)()
    return JsonResponse(
        {
            "object": "list",
            "data": [{"id": u.name, "object": "model", "owned_by": "rsi-arena"} for u in listed],
        }
    )


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _error(405, "use POST", "invalid_request_error")
    agent = await _authenticate(request)
    if agent is None:
        return _error(
            401, "missing or invalid proxy token", "authentication_error", "invalid_api_key"
        )
    try:
        body = json.loads(request.body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, "the request body is not valid JSON", "invalid_request_error")
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("messages"), list)
        or not body["messages"]
    ):
        return _error(400, "'messages' must be a non-empty list", "invalid_request_error")
    upstream = await sync_to_async(
        Upstream.objects.filter(name=body.get("model"), active=True).first
    )()
    if upstream is None:
        return _error(
            404,
            f"the model {body.get('model')!r} does not exist",
            "invalid_request_error",
            "model_not_found",
        )

    requested = (
        body.pop("max_completion_tokens", None)
        or body.get("max_tokens")
        or upstream.max_completion_tokens
    )
    if not isinstance(requested, int) or requested < 1:
        return _error(400, "'max_tokens' must be a positive integer", "invalid_request_error")
    max_tokens = min(requested, upstream.max_completion_tokens)
    prompt_bound = len(json.dumps(body["messages"]).encode()) + TEMPLATE_TOKENS_PER_MESSAGE * len(
        body["messages"]
    )
    reserved = cost_usd(upstream, prompt_tokens=prompt_bound, completion_tokens=max_tokens)
    try:
        await sync_to_async(credit_reserve)(agent=agent, amount=reserved)
    except CreditExhausted as exhausted:
        await sync_to_async(proxy_call_log)(
            agent=agent, model=upstream.name, stream=bool(body.get("stream")), status=402,
            reserved_usd=Decimal(0), error="credit exhausted",
        )  # fmt: skip
        return _error(
            402,
            f"your API credit is spent: {exhausted}. Ask the organizers or wait for the next phase.",
            "insufficient_quota",
            "credit_exhausted",
        )

    outgoing = {**body, "model": upstream.upstream_model, "max_tokens": max_tokens}
    call = _Call(agent, upstream, reserved, stream=bool(body.get("stream")))
    if call.stream:
        outgoing["stream_options"] = {"include_usage": True}
        return await call.streamed(outgoing)
    return await call.whole(outgoing)


class _Call:
    def __init__(
        self, agent: Agent, upstream: Upstream, reserved: Decimal, *, stream: bool
    ) -> None:
        self.agent = agent
        self.upstream = upstream
        self.reserved = reserved
        self.stream = stream
        self.started = time.monotonic()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.upstream.api_key:
            headers["Authorization"] = f"Bearer {self.upstream.api_key}"
        return headers

    def _url(self) -> str:
        return self.upstream.base_url.rstrip("/") + "/chat/completions"

    async def _finish(
        self, status: int, usage: dict[str, Any] | None, error: str = "", chunks: int = 0
    ) -> None:
        prompt = int((usage or {}).get("prompt_tokens") or 0)
        completion = int((usage or {}).get("completion_tokens") or (0 if usage else chunks))
        cost = (
            cost_usd(self.upstream, prompt_tokens=prompt, completion_tokens=completion)
            if status < 400
            else Decimal(0)
        )
        latency_ms = round((time.monotonic() - self.started) * 1000)

        @transaction.atomic
        def settle_and_log() -> None:
            charged = credit_settle(agent=self.agent, reserved=self.reserved, cost=cost)
            proxy_call_log(
                agent=self.agent, model=self.upstream.name, stream=self.stream, status=status,
                prompt_tokens=prompt, completion_tokens=completion, reserved_usd=self.reserved,
                cost_usd=charged, latency_ms=latency_ms, error=error,
            )  # fmt: skip

        # One transaction, shielded: a client that hangs up after `[DONE]` cancels the
        # response, and the charge must never land without its log line (or the reverse).
        await asyncio.shield(sync_to_async(settle_and_log)())

    async def whole(self, outgoing: dict[str, Any]) -> HttpResponse:
        try:
            async with httpx2.AsyncClient(timeout=UPSTREAM_TIMEOUT_S) as client:
                reply = await client.post(self._url(), json=outgoing, headers=self._headers())
        except httpx2.HTTPError as exc:
            await self._finish(502, None, error=f"upstream unreachable ({type(exc).__name__})")
            return _error(502, "the upstream model could not be reached", "upstream_error")
        if reply.status_code >= 400:
            await self._finish(reply.status_code, None, error=f"upstream HTTP {reply.status_code}")
            return _error(502 if reply.status_code >= 500 else reply.status_code,
                          f"the upstream model answered HTTP {reply.status_code}", "upstream_error")  # fmt: skip
        data = reply.json()
        await self._finish(200, data.get("usage"))
        data["model"] = self.upstream.name
        return JsonResponse(data)

    async def streamed(self, outgoing: dict[str, Any]) -> HttpResponse:
        client = httpx2.AsyncClient(timeout=UPSTREAM_TIMEOUT_S)
        try:
            upstream_request = client.build_request(
                "POST", self._url(), json=outgoing, headers=self._headers()
            )
            reply = await client.send(upstream_request, stream=True)
        except httpx2.HTTPError as exc:
            await client.aclose()
            await self._finish(502, None, error=f"upstream unreachable ({type(exc).__name__})")
            return _error(502, "the upstream model could not be reached", "upstream_error")
        if reply.status_code >= 400:
            await reply.aclose()
            await client.aclose()
            await self._finish(reply.status_code, None, error=f"upstream HTTP {reply.status_code}")
            return _error(502 if reply.status_code >= 500 else reply.status_code,
                          f"the upstream model answered HTTP {reply.status_code}", "upstream_error")  # fmt: skip

        async def relay() -> AsyncIterator[bytes]:
            usage: dict[str, Any] | None = None
            chunks = 0
            try:
                async for line in reply.aiter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        chunk = json.loads(line.removeprefix("data: "))
                        usage = chunk.get("usage") or usage
                        if any(
                            (c.get("delta") or {}).get("content")
                            for c in chunk.get("choices") or []
                        ):
                            chunks += 1
                        chunk["model"] = self.upstream.name
                        line = "data: " + json.dumps(chunk)
                    yield (line + "\n").encode()
            finally:
                await reply.aclose()
                await client.aclose()
                await self._finish(200, usage, chunks=chunks)

        return StreamingHttpResponse(relay(), content_type="text/event-stream")
