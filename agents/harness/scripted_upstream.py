"""A scripted upstream: a real OpenAI-compatible HTTP server whose model plays a policy, a list
of tool calls, so the demo and the end-to-end tests drive the platform's harness without a
real model (`python -m agents.harness.scripted_upstream --port P --policy FILE`).

A policy is JSON: `{"model": NAME, "summary": TEXT, "steps": [...]}`. Each step is either a
tool call, `{"say": TEXT, "tool": "shell", "arguments": {...}, "capture": {NAME: REGEX}}`, or
the end, `{"final": TEXT}` (`raw_arguments`, text sent as is, plays a model that
sends malformed arguments). `{NAME}` in a step's strings is replaced by a value captured
earlier: each regex of `capture` is matched on the output of that step's tool call (the tool
message the next request carries) and its first group kept under NAME; `--var NAME=VALUE` sets
values up front. A capture that does not match ends the play with a final message saying so.

Requests without `tools` (the harness asking for a summary of old turns) get the policy's
`summary` and do not advance the play. Replies are whole or streamed (SSE, tool calls in
pieces, as OpenAI sends them) and report usage (about 4 characters a token), which the
platform's proxy bills on.

It answers only the proxy: every `/v1` request must carry `Authorization: Bearer KEY`, the
upstream key the proxy holds (`Upstream.api_key`), else 401, so an agent on the same host
cannot reach the model around the proxy's meter. The command line reads the key from the
environment (`SCRIPTED_UPSTREAM_API_KEY`, never an argument, which every user can read in
`ps`) and refuses to start without one; only a server in a test's own process may go keyless.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agents.harness.threaded_server import ThreadedServer, free_port

KEY_VARIABLE = "SCRIPTED_UPSTREAM_API_KEY"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Policy:
    """The play's state: the next step, the values captured, the captures awaited."""

    def __init__(self, policy: dict[str, Any], values: dict[str, str] | None = None) -> None:
        self.model = str(policy.get("model", "scripted-agent"))
        self.summary = str(policy.get("summary", "Summary: the work so far is in the journal."))
        self.steps: list[dict[str, Any]] = list(policy["steps"])
        self.initial_values: dict[str, str] = dict(values or {})
        self.values: dict[str, str] = dict(self.initial_values)
        self.position = 0
        self.awaiting: dict[str, str] = {}
        self.lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path, values: dict[str, str] | None = None) -> Policy:
        return cls(json.loads(path.read_text(encoding="utf-8")), values)

    def _fill(self, value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: self.values.get(m.group(1), m.group(0)), value)
        if isinstance(value, dict):
            return {key: self._fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._fill(item) for item in value]
        return value

    def next_reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message for this request: the next step, filled in."""
        with self.lock:
            if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
                # A new conversation (a run of a later phase): the play starts over.
                self.position, self.awaiting = 0, {}
                self.values = dict(self.initial_values)
            if self.awaiting:
                output = _last_tool_output(messages)
                for name, pattern in self.awaiting.items():
                    found = re.search(pattern, output)
                    if found is None:
                        self.position = len(self.steps)
                        return {"content": f"I stop: no {name} ({pattern}) in the last output."}
                    self.values[name] = found.group(1)
                self.awaiting = {}
            if self.position >= len(self.steps):
                return {"content": "I am done."}
            step = self.steps[self.position]
            self.position += 1
            if "final" in step:
                self.position = len(self.steps)
                return {"content": self._fill(step["final"])}
            self.awaiting = dict(step.get("capture") or {})
            arguments = step.get("raw_arguments")  # as sent, for tests of malformed calls
            if not isinstance(arguments, str):
                arguments = json.dumps(self._fill(step.get("arguments") or {}))
            call = {
                "id": f"call_{self.position}",
                "type": "function",
                "function": {"name": step["tool"], "arguments": arguments},
            }
            return {"content": self._fill(step.get("say") or None), "tool_calls": [call]}


def _last_tool_output(messages: list[dict[str, Any]]) -> str:
    outputs = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        outputs.append(str(message.get("content") or ""))
    return "\n".join(reversed(outputs))


def _usage(body: bytes, reply: dict[str, Any], max_tokens: Any) -> dict[str, int]:
    completion = len(json.dumps(reply)) // 4 + 1
    if isinstance(max_tokens, int) and max_tokens > 0:
        completion = min(completion, max_tokens)
    prompt = len(body) // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


class ScriptedUpstream:
    """The server, in a thread of this process (tests) or in the foreground (`main`)."""

    def __init__(
        self, policy: Policy, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
    ) -> None:
        self.policy = policy
        self.host = host
        self.port = port
        self.api_key = api_key  # None: keyless, for a server in a test's own process only
        self.requests = 0
        self._running: ThreadedServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self._health),
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )

    def start(self) -> None:
        self.port = self.port or free_port(self.host)
        self._running = ThreadedServer(
            self.app(), host=self.host, port=self.port, what="the scripted upstream"
        )
        self._running.start()

    def stop(self) -> None:
        if self._running is not None:
            self._running.stop()

    def serve_forever(self) -> None:
        self.port = self.port or free_port(self.host)
        uvicorn.run(self.app(), host=self.host, port=self.port, log_level="warning")

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    def _refused(self, request: Request) -> JSONResponse | None:
        """401 unless the request carries the key (compared in constant time)."""
        if self.api_key is None:
            return None
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if hmac.compare_digest(given.encode(), self.api_key.encode()):
            return None
        return JSONResponse(
            {"error": {"message": "missing or wrong API key", "type": "authentication_error"}},
            status_code=401,
        )

    async def _models(self, request: Request) -> JSONResponse:
        if refused := self._refused(request):
            return refused
        return JSONResponse(
            {"object": "list", "data": [{"id": self.policy.model, "object": "model"}]}
        )

    async def _chat(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        raw = await request.body()
        try:
            body = json.loads(raw)
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": {"message": "not a chat request"}}, status_code=400)
        self.requests += 1
        if body.get("tools"):
            reply = self.policy.next_reply(messages)
        else:
            reply = {"content": self.policy.summary}
        usage = _usage(raw, reply, body.get("max_tokens"))
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        model = str(body.get("model", self.policy.model))
        if body.get("stream"):
            return StreamingResponse(
                _chunks(model, reply, finish, usage), media_type="text/event-stream"
            )
        message = {"role": "assistant", "content": reply.get("content"), **(
            {"tool_calls": reply["tool_calls"]} if reply.get("tool_calls") else {})}  # fmt: skip
        return JSONResponse({
            "id": f"chatcmpl-scripted-{self.requests}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        })  # fmt: skip


async def _chunks(
    model: str, reply: dict[str, Any], finish: str, usage: dict[str, int]
) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
        data = {
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra,
        }  # fmt: skip
        return f"data: {json.dumps(data)}\n\n"

    yield chunk({"role": "assistant"})
    text = reply.get("content") or ""
    for start in range(0, len(text), 16):
        yield chunk({"content": text[start : start + 16]})
    for index, call in enumerate(reply.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                     "function": {"name": call["function"]["name"], "arguments": arguments[:half]}}]})  # fmt: skip
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
    yield chunk({}, finish, usage=usage)
    yield "data: [DONE]\n\n"


def _values(pairs: list[str]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not _PLACEHOLDER.fullmatch("{" + name + "}"):
            raise argparse.ArgumentTypeError(f"--var {pair!r}: NAME=VALUE")
        values[name] = value
    return values


def main(argv: list[str] | None = None) -> None:
    found = argparse.ArgumentParser(prog="python -m agents.harness.scripted_upstream")
    found.add_argument("--policy", type=Path, required=True)
    found.add_argument("--port", type=int, required=True)
    found.add_argument("--host", default="127.0.0.1")
    found.add_argument("--var", action="append", default=[], metavar="NAME=VALUE")
    args = found.parse_args(argv)
    key = os.environ.get(KEY_VARIABLE, "")
    if not key:
        found.error(f"set {KEY_VARIABLE} to the key the proxy sends: agents must not reach it")
    policy = Policy.from_file(args.policy, _values(args.var))
    ScriptedUpstream(policy, host=args.host, port=args.port, api_key=key).serve_forever()


if __name__ == "__main__":
    main()
