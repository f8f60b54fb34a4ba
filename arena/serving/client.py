"""The one client the arena uses to talk to every contestant: OpenAI-compatible, async, streaming.

A local `transformers serve` process and a vLLM server on a GPU node speak the same protocol,
so moving a contestant to a GPU needs a new base URL, not new code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import openai

# `openai` is imported where a client is first built, not here: it is most of a second and a
# half of every process that loads Django (this module is reached from the apps' models), and
# the keeper's steps, management commands and cluster jobs that load Django never stream.

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a voter is told; never the exception's own message, which may name a URL or a model.
CONNECTION_LOST = "the model server connection was lost"
CUT_OFF = "the answer ended before the model said it was finished"


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str = ""


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class StreamEnd:
    finish_reason: str  # "stop", "length", ... as the server reports it; "error" on failure
    error: str = ""
    first_token_s: float | None = None
    total_s: float = 0.0


StreamEvent = TextDelta | StreamEnd

# One client per model server and event loop, kept for the loop's life: building a client
# builds an SSL context (certifi's whole bundle), which was half of a worker's CPU per battle
# (bench/README.md), and a kept client reuses its connections. Per loop, because a client's
# connections belong to the loop that opened them.
# Beyond this many servers (moved, restarted), the least recently used client is closed: an
# arena serves one phase's contestants, a dozen or two, so that one has no stream left.
CLIENTS_PER_LOOP = 64
_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, OrderedDict[tuple[str, str], openai.AsyncOpenAI]
] = weakref.WeakKeyDictionary()
_closing: set[asyncio.Task[None]] = set()


def _client_for(endpoint: Endpoint) -> openai.AsyncOpenAI:
    import openai

    loop = asyncio.get_running_loop()
    clients = _clients.setdefault(loop, OrderedDict())
    key = (endpoint.base_url, endpoint.api_key)
    client = clients.get(key)
    if client is not None:
        clients.move_to_end(key)
        return client
    client = clients[key] = openai.AsyncOpenAI(
        base_url=endpoint.base_url, api_key=endpoint.api_key or "unused", max_retries=0
    )
    while len(clients) > CLIENTS_PER_LOOP:
        _, oldest = clients.popitem(last=False)
        closing = loop.create_task(oldest.close())
        _closing.add(closing)  # the loop keeps only a weak reference to a task
        closing.add_done_callback(_closing.discard)
    return client


class _ServerClock:
    """The answer's time budget, spent only while waiting on the server.

    Each wait gets its own timeout, so the deadline can never fire while the caller holds a
    yielded delta (its cancellation would land in the caller's code), and a slow reader does
    not use up the model's time.
    """

    def __init__(self, budget_s: float) -> None:
        self.left_s = budget_s

    async def wait(self, awaitable: Awaitable[T]) -> T:
        began = time.monotonic()
        try:
            async with asyncio.timeout(max(self.left_s, 0.0)):
                return await awaitable
        finally:
            self.left_s -= time.monotonic() - began


async def stream_chat(
    endpoint: Endpoint,
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    temperature: float,
    timeout_s: float,
) -> AsyncIterator[StreamEvent]:
    """Yield text deltas, then exactly one `StreamEnd`; never raises for a model's failure.

    A connection error, an HTTP error, an unreadable stream, a stream that ends without a
    finish reason (every conforming server sends one on its last chunk) or more than
    `timeout_s` spent waiting on the server ends the stream with finish_reason "error" and a
    short message fit to show a voter (no URLs, no model names).
    """
    client = _client_for(endpoint)
    clock = _ServerClock(timeout_s)
    started = time.monotonic()
    first_token_s: float | None = None
    finish_reason = ""
    failure = ""
    stream = None
    try:
        try:
            stream = await clock.wait(
                client.chat.completions.create(
                    model=endpoint.model,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stream=True,
                    timeout=timeout_s,
                )
            )
        except Exception as exc:
            failure = _voter_safe_failure(exc, endpoint, timeout_s, answering=False)
            stream = None
        while stream is not None and not failure:
            try:
                chunk = await clock.wait(anext(stream, None))  # type: ignore[arg-type]  # openai stub: stream=True returns an AsyncStream
            except Exception as exc:
                failure = _voter_safe_failure(exc, endpoint, timeout_s, answering=True)
                break
            if chunk is None:
                break
            for choice in chunk.choices:
                text = choice.delta.content if choice.delta else None
                if text:
                    if first_token_s is None:
                        first_token_s = time.monotonic() - started
                    yield TextDelta(text)
                if choice.finish_reason:
                    finish_reason = choice.finish_reason
    finally:
        if stream is not None:
            # Drops the connection of an answer cut short (its server may still be writing);
            # a finished one goes back to the client's pool. Closing is not the model's answer:
            # whatever it raises, the voter's stream has ended already.
            with contextlib.suppress(Exception):
                await stream.close()  # type: ignore[union-attr]  # openai stub: stream=True returns an AsyncStream
    if not failure and not finish_reason:
        failure = CUT_OFF
    if failure:
        yield StreamEnd("error", failure, first_token_s, _since(started))
    else:
        yield StreamEnd(finish_reason, "", first_token_s, _since(started))


def _voter_safe_failure(
    exc: Exception, endpoint: Endpoint, timeout_s: float, *, answering: bool
) -> str:
    import openai

    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(exc, openai.APIStatusError):
        return f"model server error (HTTP {exc.status_code})"
    if isinstance(exc, openai.APIConnectionError | OSError) and not answering:
        return f"model server unreachable ({type(exc).__name__})"
    # Anything else — the connection dropped mid-answer, an error event in the stream, a chunk
    # that is not JSON — is a failure of this model, not of the arena: the operator gets the
    # traceback, the voter a plain sentence.
    log.warning("stream from %s (%s) failed", endpoint.base_url, endpoint.model, exc_info=exc)
    if isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIConnectionError):
        return f"model server error ({type(exc).__name__})"
    return f"{CONNECTION_LOST} ({type(exc).__name__})"


def _since(started: float) -> float:
    return time.monotonic() - started
