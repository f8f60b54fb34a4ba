"""The one client the arena uses to talk to every contestant: OpenAI-compatible, async, streaming.

A local `transformers serve` process and a vLLM server on a GPU node speak the same protocol,
so moving a contestant to a GPU needs a new base URL, not new code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import openai


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


async def stream_chat(
    endpoint: Endpoint,
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    temperature: float,
    timeout_s: float,
) -> AsyncIterator[StreamEvent]:
    """Yield text deltas, then exactly one `StreamEnd`; never raises for a model's failure.

    A connection error, an HTTP error or running past `timeout_s` ends the stream with
    finish_reason "error" and a short message fit to show a voter (no URLs, no model names).
    """
    client = openai.AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or "unused",
        timeout=timeout_s,
        max_retries=0,
    )
    started = time.monotonic()
    first_token_s: float | None = None
    finish_reason = ""
    try:
        async with asyncio.timeout(timeout_s):
            stream = await client.chat.completions.create(
                model=endpoint.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=temperature,
                stream=True,
            )
            async for chunk in stream:
                for choice in chunk.choices:
                    text = choice.delta.content if choice.delta else None
                    if text:
                        if first_token_s is None:
                            first_token_s = time.monotonic() - started
                        yield TextDelta(text)
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
    except TimeoutError:
        yield StreamEnd("error", f"timed out after {timeout_s:g} s", first_token_s, _since(started))
        return
    except openai.APIStatusError as exc:
        yield StreamEnd(
            "error", f"model server error (HTTP {exc.status_code})", first_token_s, _since(started)
        )
        return
    except (openai.APIError, OSError) as exc:
        yield StreamEnd(
            "error",
            f"model server unreachable ({type(exc).__name__})",
            first_token_s,
            _since(started),
        )
        return
    finally:
        await client.close()
    yield StreamEnd(finish_reason or "unknown", "", first_token_s, _since(started))


def _since(started: float) -> float:
    return time.monotonic() - started
