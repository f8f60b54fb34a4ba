"""The metered LLM API proxy, in the wire protocols agents' scaffolds speak:
`/proxy/v1/chat/completions` and `/proxy/v1/responses` (OpenAI), `/proxy/v1/embeddings`, and
`/proxy/v1/messages` (Anthropic), with `/proxy/v1/models` listing what the agent may call and
in which protocols (`agents.wire_protocols`: each protocol's format, usage and errors).

Agents never hold an upstream key: they call this with their proxy token (a bearer token, or
Anthropic's `x-api-key`); the proxy adds the key on the way out. Each call is priced first (`agents.pricing`: the most the upstream can
bill for the body actually sent; what cannot be priced is refused), reserves that amount,
and settles on the usage the upstream reports (`agents.credit`). The token says which ledger
pays: the agent's proxy and judge tokens its API credit, its scaffold's token the scaffold
credit (`agents.selectors.proxy_caller`); one never falls back on the other.

The exchange with the upstream runs in a task of its own, shielded from the agent's request:
an agent that hangs up cancels its request, never the exchange, which reads the upstream's
answer to its end, learns the usage and settles. An exchange that learns no usage (an
upstream that sent none, a connection cut mid-answer) charges the whole reservation; only an
upstream that never got the request, or refused it, charges nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import httpx2
from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agents.credit import (
    CALL_TIMEOUT_S,
    CreditExhausted,
    credit_reserve,
    credit_settle,
    proxy_call_log,
    usage_cost_usd,
)
from agents.models import Agent, ProxyCall, Upstream
from agents.pricing import PricedRequest, Unpriceable
from agents.selectors import proxy_caller, upstreams_active
from agents.trajectory import ReplyCollector, model_call_record
from agents.wire_protocols import PROTOCOLS, UsageTracker, WireProtocol
from arena.json_api import JsonBodyRefused, json_object

T = TypeVar("T")

UPSTREAM_TIMEOUT_S = 600.0  # for each read; CALL_TIMEOUT_S bounds the whole exchange
_exchanges: set[asyncio.Task[Any]] = set()  # strong references: the loop keeps weak ones only


def _in_background(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run `work` beyond the agent's request. In a context of its own: the request's context
    carries an executor for its database calls that quits when the request ends."""
    task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
    _exchanges.add(task)
    task.add_done_callback(_exchanges.discard)
    return task


async def _authenticate(request: HttpRequest, protocol: WireProtocol) -> tuple[Agent, str] | None:
    """The calling agent and the ledger its token bills (`ProxyCall.Budget`)."""
    token = protocol.token(request)
    if not token:
        return None
    return await sync_to_async(proxy_caller)(token)


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    """What the agent may call, and in which protocols. Both SDKs read the list: OpenAI's
    fields (`object`, `owned_by`) and Anthropic's (`type`, `display_name`) are all there."""
    chat = PROTOCOLS["chat"]
    if request.method != "GET":
        return chat.error(405, "use GET", "invalid_request_error")
    if await _authenticate(request, PROTOCOLS["messages"]) is None:
        return chat.error(
            401, "missing or invalid proxy token", "authentication_error", "invalid_api_key"
        )
    listed = await sync_to_async(upstreams_active)()
    data = [
        {
            "id": u.name, "object": "model", "owned_by": "rsi-arena", "type": "model",
            "display_name": u.name, "created_at": "1970-01-01T00:00:00Z",
            "protocols": [p for p in PROTOCOLS if p in (u.protocols or [])],
        }
        for u in listed
    ]  # fmt: skip
    return JsonResponse(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


async def _proxied(request: HttpRequest, protocol: WireProtocol) -> HttpResponse:
    """One call in `protocol`: authenticated, priced, reserved, forwarded and settled."""
    if request.method != "POST":
        return protocol.error(405, "use POST", "invalid_request_error")
    caller = await _authenticate(request, protocol)
    if caller is None:
        return protocol.error(
            401, "missing or invalid proxy token", "authentication_error", "invalid_api_key"
        )
    agent, budget = caller
    try:
        body = json_object(request.body)  # bounded: deep nesting, 5,000 digits, NaN refused
    except JsonBodyRefused as refused:
        return protocol.error(400, refused.message, "invalid_request_error", refused.code)
    upstream = await sync_to_async(
        Upstream.objects.filter(name=body.get("model"), active=True).first
    )()
    if upstream is None:
        return protocol.error(
            404,
            f"the model {body.get('model')!r} does not exist",
            "invalid_request_error",
            "model_not_found",
        )
    spoken = [name for name in PROTOCOLS if name in (upstream.protocols or [])]
    if protocol.name not in spoken:
        return protocol.error(
            404,
            f"the model {upstream.name!r} is not served through {protocol.what} here; it"
            f" speaks: {', '.join(PROTOCOLS[name].what for name in spoken) or 'nothing'}",
            "invalid_request_error",
            "model_not_found",
        )
    try:
        priced = protocol.price(body, upstream)
    except Unpriceable as refused:
        return protocol.error(400, str(refused), "invalid_request_error", "unpriceable_request")
    exchange = _Exchange(agent, upstream, priced, budget, protocol, request, body)
    if priced.stream:
        return await exchange.streamed()
    # Shielded: the agent hanging up cancels this view, never the exchange and its settlement.
    return await asyncio.shield(_in_background(exchange.whole()))


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _proxied(request, PROTOCOLS["chat"])


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponse:
    return await _proxied(request, PROTOCOLS["responses"])


@csrf_exempt
async def embeddings(request: HttpRequest) -> HttpResponse:
    return await _proxied(request, PROTOCOLS["embeddings"])


@csrf_exempt
async def messages(request: HttpRequest) -> HttpResponse:
    return await _proxied(request, PROTOCOLS["messages"])


@dataclass
class _Outcome:
    """What the upstream did with the call; until it is known, the worst for the agent: the
    request was sent and nothing says what it cost (the reservation is charged)."""

    status: int = 502
    billed: bool = True  # False: the upstream never took or refused the request
    error: str = ""


class _Exchange:
    """One call: its reservation, its exchange with the upstream, and its settlement. Runs
    in a task of its own (`_in_background`), so it settles whatever the agent does."""

    def __init__(
        self,
        agent: Agent,
        upstream: Upstream,
        priced: PricedRequest,
        budget: str,
        protocol: WireProtocol,
        request: HttpRequest,
        body: dict[str, Any],
    ) -> None:
        self.agent = agent
        self.budget = budget  # the ledger that pays: ProxyCall.Budget
        self.upstream = upstream
        self.priced = priced
        self.protocol = protocol
        self.headers = protocol.upstream_headers(upstream, request)
        self.request_messages = protocol.chat_messages(body)  # for the trajectory
        self.started = time.monotonic()
        self.call: ProxyCall | None = None
        self.usage: UsageTracker = protocol.tracker()
        self.reply = ReplyCollector()  # for the agent's trajectory

    def _error(self, status: int, message: str, kind: str, code: str | None = None) -> JsonResponse:
        return self.protocol.error(status, message, kind, code)

    def _url(self) -> str:
        return self.upstream.base_url.rstrip("/") + self.protocol.path

    async def _reserve(self) -> HttpResponse | None:
        """Reserve the call's worst case; the 402 to answer when the credit cannot cover it."""
        try:
            self.call = await sync_to_async(_with_fresh_connection)(
                credit_reserve, agent=self.agent, amount=self.priced.reserved_usd,
                model=self.upstream.name, stream=self.priced.stream, budget=self.budget,
                protocol=self.protocol.name,
            )  # fmt: skip
        except CreditExhausted as exhausted:
            scaffold = self.budget == ProxyCall.Budget.SCAFFOLD
            await sync_to_async(_with_fresh_connection)(
                proxy_call_log, agent=self.agent, model=self.upstream.name,
                stream=self.priced.stream, status=402, reserved_usd=Decimal(0),
                budget=self.budget, protocol=self.protocol.name,
                error="scaffold credit exhausted" if scaffold else "credit exhausted",
            )  # fmt: skip
            if scaffold:
                return self._error(
                    402,
                    f"the scaffold's budget is spent: {exhausted}. The organizers set it; the"
                    " agent's API credit is never used in its place.",
                    "insufficient_quota",
                    "scaffold_credit_exhausted",
                )
            return self._error(
                402,
                f"your API credit is spent: {exhausted}. Ask the organizers or wait for the next"
                " phase.",
                "insufficient_quota",
                "credit_exhausted",
            )
        return None

    async def _settle(self, outcome: _Outcome) -> None:
        """Charge the usage the upstream reported; with none, the whole reservation (unless
        the upstream never took the request). An answer whose usage says it cost nothing is
        an answer with no usage: an answered call is never free."""
        assert self.call is not None
        usage = self.usage.usage
        error = outcome.error
        if usage is not None and usage.prompt == 0 and usage.completion == 0:
            usage = None
        if not outcome.billed:
            cost, usage = Decimal(0), None
        elif usage is None:
            cost = self.call.reserved_usd
            note = "the upstream reported no usage; charged the reservation"
            error = f"{error}; {note}" if error else note
        else:
            cost = usage_cost_usd(self.upstream, usage)
        prompt = usage.prompt if usage else 0
        completion = usage.completion if usage else 0
        latency_ms = round((time.monotonic() - self.started) * 1000)
        settle = sync_to_async(_with_fresh_connection)(
            credit_settle, call=self.call, cost=cost, status=outcome.status,
            prompt_tokens=prompt, completion_tokens=completion,
            cached_prompt_tokens=usage.cached_prompt if usage else 0,
            cache_write_tokens=usage.cache_write if usage else 0,
            error=error, latency_ms=latency_ms,
        )  # fmt: skip
        await asyncio.shield(settle)
        record = sync_to_async(_with_fresh_connection)(
            model_call_record, agent=self.agent, model=self.upstream.name,
            request_body=self.priced.body, reply=self.reply, status=outcome.status,
            budget=self.budget, protocol=self.protocol.name,
            request_messages=self.request_messages,
            prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost,
            latency_ms=latency_ms, error=error,
        )  # fmt: skip
        await asyncio.shield(record)  # never raises: a failure to record is logged

    async def whole(self) -> HttpResponse:
        refused = await self._reserve()
        if refused is not None:
            return refused
        outcome = _Outcome()
        try:  # settled before the agent gets the answer, whatever happens
            return await self._ask_whole(outcome)
        finally:
            await self._settle(outcome)

    async def _ask_whole(self, outcome: _Outcome) -> HttpResponse:
        try:
            async with (
                asyncio.timeout(CALL_TIMEOUT_S),
                httpx2.AsyncClient(timeout=UPSTREAM_TIMEOUT_S) as client,
            ):
                reply = await client.post(
                    self._url(), content=self.priced.body, headers=self.headers
                )
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            outcome.billed, outcome.error = False, f"upstream unreachable ({type(exc).__name__})"
            return self._error(502, "the upstream model could not be reached", "upstream_error")
        except (httpx2.HTTPError, TimeoutError) as exc:
            outcome.error = f"upstream failed mid-answer ({type(exc).__name__})"
            return self._error(502, "the upstream model did not answer in full", "upstream_error")
        if reply.status_code >= 400:
            return self._upstream_refused(outcome, reply.status_code)
        try:
            data = json.loads(reply.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            outcome.error = "the upstream's answer is not JSON"
            return self._error(502, "the upstream model's answer was not JSON", "upstream_error")
        outcome.status = 200
        self.usage.see_reply(data)
        self.protocol.collect(self.reply, data)
        self.protocol.rename(data, self.upstream.name)
        return JsonResponse(data)

    async def streamed(self) -> HttpResponse:
        """The upstream is read by a task of its own into a queue; the agent's response
        relays the queue. An agent that hangs up stops the relay, not the reading."""
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        opened: asyncio.Future[HttpResponse | None] = asyncio.get_running_loop().create_future()
        listening = [True]
        _in_background(self._read_stream(lines, opened, listening))
        refused = await asyncio.shield(opened)
        if refused is not None:
            return refused

        async def relay() -> AsyncIterator[bytes]:
            try:
                while (line := await lines.get()) is not None:
                    yield (line + "\n").encode()
            finally:
                listening[0] = False

        return StreamingHttpResponse(relay(), content_type="text/event-stream")

    async def _read_stream(
        self,
        lines: asyncio.Queue[str | None],
        opened: asyncio.Future[HttpResponse | None],
        listening: list[bool],
    ) -> None:
        refused = await self._reserve()
        if refused is not None:
            opened.set_result(refused)
            return
        outcome = _Outcome()
        try:
            async with (
                asyncio.timeout(CALL_TIMEOUT_S),
                httpx2.AsyncClient(timeout=UPSTREAM_TIMEOUT_S) as client,
                client.stream(
                    "POST", self._url(), content=self.priced.body, headers=self.headers
                ) as reply,
            ):
                if reply.status_code >= 400:
                    opened.set_result(self._upstream_refused(outcome, reply.status_code))
                    return
                opened.set_result(None)
                async for line in reply.aiter_lines():
                    line = self._relayed_line(line)
                    if listening[0]:
                        lines.put_nowait(line)
                outcome.status = 200
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            outcome.billed, outcome.error = False, f"upstream unreachable ({type(exc).__name__})"
        except (httpx2.HTTPError, TimeoutError) as exc:
            outcome.error = f"upstream failed mid-answer ({type(exc).__name__})"
        finally:
            if not opened.done():
                opened.set_result(
                    self._error(502, "the upstream model could not be reached", "upstream_error")
                )
            try:  # settled before the agent sees the end: its next call sees the ledger right
                await self._settle(outcome)
            finally:
                lines.put_nowait(None)

    def _relayed_line(self, line: str) -> str:
        """One line of the upstream's event stream, as the agent gets it: its data read for
        the usage and the trajectory, and the model renamed. `event:` lines and the rest pass
        as they are."""
        if not line.startswith("data: ") or line == "data: [DONE]":
            return line
        try:
            chunk = json.loads(line.removeprefix("data: "))
        except ValueError:
            return line
        if not isinstance(chunk, dict):
            return line
        self.usage.see_event(chunk)
        self.protocol.collect_event(self.reply, chunk)
        self.protocol.rename_event(chunk, self.upstream.name)
        return "data: " + json.dumps(chunk)

    def _upstream_refused(self, outcome: _Outcome, status: int) -> JsonResponse:
        """An upstream that answers an HTTP error bills nothing; the agent sees the status (a
        server error as 502)."""
        outcome.status, outcome.billed, outcome.error = status, False, f"upstream HTTP {status}"
        return self._error(
            502 if status >= 500 else status,
            f"the upstream model answered HTTP {status}",
            "upstream_error",
        )


def _with_fresh_connection(work: Callable[..., T], **arguments: Any) -> T:
    # Exchanges run outside any request: no request_finished signal tidies this thread's
    # database connection, so a broken or expired one is dropped here.
    close_old_connections()
    try:
        return work(**arguments)
    finally:
        close_old_connections()
