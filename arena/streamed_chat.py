"""One reader for a judge's answer: an OpenAI-compatible chat completion, streamed, read to its
end within bounds of size and time, and the first JSON object in its text.

The category judge (`arena.battles.category_judge`) and the trajectory judge
(`safety.judge`) both ask a model for one JSON object and read the reply the same way, so the
reading lives here, in the project's base (every app may import it; it imports no app).

The reply is hostile: the judge may be an agent's model, or a server an agent reaches, so the
body is read in bytes up to `max_body_bytes`, no line is ever held past that, the text kept is
cut at `max_chars`, and the whole call stops at `timeout_s` even if the server keeps dripping.
The body is read past `[DONE]` to its end (the official client hangs up at `[DONE]`): the
platform's proxy books a call as its stream closes, and a hang-up can cut that short.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

# SSE framing and the JSON of each chunk cost far more than the text they carry (about 150
# bytes a token); a judge's reply of a few hundred tokens is tens of kilobytes.
DEFAULT_MAX_BODY_BYTES = 2_000_000


class StreamedChatError(RuntimeError):
    """The endpoint could not be reached, failed, or sent a reply past its bounds."""


def streamed_chat_text(
    *,
    base_url: str,
    api_key: str,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeout_s: float,
    max_chars: int,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> str:
    """The reply's text, at most `max_chars` of it; StreamedChatError with a reason a person
    can read when the call fails, takes longer than `timeout_s` in all, or its body passes
    `max_body_bytes`."""
    import httpx
    import openai

    deadline = time.monotonic() + timeout_s
    client = openai.OpenAI(
        base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=1
    )
    try:
        with client.chat.completions.with_streaming_response.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0.0,
            stream=True,
        ) as response:
            return _reply_text(
                _bounded_lines(response.iter_bytes(), max_body_bytes, deadline), max_chars
            )
    except openai.APIStatusError as exc:
        raise StreamedChatError(f"answered HTTP {exc.status_code}") from None
    except (openai.APIError, httpx.HTTPError, OSError) as exc:
        raise StreamedChatError(f"could not be reached ({type(exc).__name__})") from None
    finally:
        client.close()


def _bounded_lines(chunks: Iterable[bytes], max_bytes: int, deadline: float) -> Iterable[str]:
    """The body's lines, as long as the body stays within `max_bytes` and the clock within
    `deadline`; a line is split on `\\n` only, in bytes, so a UTF-8 character is never cut."""
    size = 0
    pending = b""
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise StreamedChatError(f"sent more than {max_bytes:,} bytes")
        if time.monotonic() > deadline:
            raise StreamedChatError("took longer than its time limit")
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace").strip()
    if pending:
        yield pending.decode("utf-8", errors="replace").strip()


def _reply_text(lines: Iterable[str], max_chars: int) -> str:
    pieces: list[str] = []
    size = 0
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line.removeprefix("data:").strip()
        if payload == "[DONE]":
            continue
        try:
            chunk: Any = json.loads(payload)
        except (ValueError, RecursionError):
            raise StreamedChatError("sent a stream that is not valid JSON") from None
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str) and size < max_chars:
                pieces.append(piece[: max_chars - size])
                size += len(pieces[-1])
    return "".join(pieces)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def first_json_object(
    text: str, wanted: Callable[[dict[str, Any]], bool], *, max_starts: int = 50
) -> dict[str, Any] | None:
    """The first JSON object in `text` that `wanted` accepts, looking first inside ```json
    fences, then in the whole text (prose around the object is fine); None if there is none.
    At most `max_starts` `{` of each candidate are tried, so a reply of nothing but `{` stays
    linear."""
    decoder = json.JSONDecoder()
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for start in islice((i for i, c in enumerate(candidate) if c == "{"), max_starts):
            try:
                data, _ = decoder.raw_decode(candidate, start)
            except (ValueError, RecursionError):  # a reply nested a thousand deep
                continue
            if isinstance(data, dict) and wanted(data):
                return data
    return None
