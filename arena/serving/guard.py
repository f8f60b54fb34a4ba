"""`transformers serve` behind a key: `python -m arena.serving.guard [--served-model-name ID]
[transformers serve options] CHECKPOINT`, with the key in the environment (`ARENA_SERVE_KEY`).

`transformers serve` has no API key and names its model by the checkpoint path (who made it).
The platform's model servers must answer only the platform (agents share the host), so this
runs the same server with a small ASGI guard in front of its app, in the same process: there
is no unguarded port left behind it for anyone to reach. The guard
- refuses every request without `Authorization: Bearer <key>` (401), compared in constant time;
- answers only what the arena uses: `/health`, `/v1/models`, `/v1/chat/completions` and
  `/v1/completions` (404 for the rest: `/load_model`, `/reset`, ...);
- serves the model under an opaque name: requests name it, `/v1/models` lists it, and the
  checkpoint path is replaced by it in answers;
- proves it holds the key without anyone sending it: `GET /health?nonce=N` (no key) answers
  `{"status": "ok", "proof": HMAC-SHA256(key, "arena-health:" + N)}` once the server is up. The
  platform's readiness and liveness checks use only this (arena/serving/local.py
  `authorized_health`), so a listener that is not the platform's server learns nothing from
  them and cannot pass them;
- with `--fd N`, serves on a listening socket the platform bound and handed down (the local
  backend): the port is the platform's from before the server starts until it is stopped, so
  no one else can listen there first.

vLLM needs none of this (`VLLM_API_KEY` and `--served-model-name`); see arena/serving/slurm.py.
This module imports no Django: it runs on cluster nodes too.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

KEY_VARIABLE = "ARENA_SERVE_KEY"
MAX_REQUEST_BYTES = 8 * 1024 * 1024
NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")
ROUTES = {
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class KeyGuard:
    """ASGI middleware: the key, the allowed routes and the opaque model name."""

    def __init__(self, app: App, *, key: str, served_model_name: str, checkpoint: str) -> None:
        if not key:
            raise ValueError("a model server needs a key")
        self.app = app
        self.key = key
        self.expected = f"Bearer {key}".encode()
        self.served_model_name = served_model_name
        self.checkpoint = checkpoint
        self.renames = [
            (json.dumps(checkpoint)[1:-1].encode(), served_model_name.encode()),
            (checkpoint.encode(), served_model_name.encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        nonce = _health_nonce(scope)
        if nonce is not None:
            await self._prove(scope, receive, send, nonce)
            return
        if not self._authorized(scope):
            await _reply(send, 401, "missing or invalid API key", "authentication_error")
            return
        route = (scope["method"], scope["path"])
        if route not in ROUTES:
            await _reply(send, 404, "not found", "invalid_request_error")
            return
        if route == ("GET", "/v1/models"):
            await _send_json(send, 200, {"object": "list", "data": [self._model_card()]})
            return
        if scope["method"] == "POST":
            body = await _read_body(receive)
            if body is None:
                await _reply(send, 413, "request too large", "invalid_request_error")
                return
            rewritten = self._request_for_server(body)
            if rewritten is None:
                await _reply(
                    send,
                    404,
                    "the model does not exist",
                    "invalid_request_error",
                    "model_not_found",
                )
                return
            scope, receive = _with_body(scope, receive, rewritten)
        await self.app(scope, receive, self._renaming(send))

    async def _prove(self, scope: Scope, receive: Receive, send: Send, nonce: str) -> None:
        """The server's own `/health` first (is it up?), then the proof in place of its body."""
        status = 0

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await self.app({**scope, "query_string": b""}, receive, capture)
        if status != 200:
            await _reply(send, 503, "not ready", "server_error")
            return
        await _send_json(send, 200, {"status": "ok", "proof": health_proof(self.key, nonce)})

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.served_model_name, "object": "model", "created": 0, "owned_by": "arena"}

    def _request_for_server(self, body: bytes) -> bytes | None:
        """The body with the opaque name swapped for the path the server knows; None when the
        request names another model. A body that is not JSON goes through for the server to
        refuse."""
        try:
            request = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return body
        if not isinstance(request, dict):
            return body
        if request.get("model", self.served_model_name) != self.served_model_name:
            return None
        request["model"] = self.checkpoint
        return json.dumps(request).encode()

    def _renaming(self, send: Send) -> Send:
        async def renaming_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                # The body changes length; the server sends it chunked instead.
                message = {
                    **message,
                    "headers": [
                        (name, value)
                        for name, value in message.get("headers", [])
                        if name.lower() != b"content-length"
                    ],
                }
            elif message["type"] == "http.response.body" and message.get("body"):
                body = message["body"]
                for old, new in self.renames:
                    body = body.replace(old, new)
                message = {**message, "body": body}
            await send(message)

        return renaming_send


def health_proof(key: str, nonce: str) -> str:
    """What only a holder of `key` can answer to the challenge `nonce`."""
    return hmac.new(key.encode(), f"arena-health:{nonce}".encode(), hashlib.sha256).hexdigest()


def _health_nonce(scope: Scope) -> str | None:
    """The nonce of a `GET /health?nonce=N` challenge; None for any other request."""
    if (scope["method"], scope["path"]) != ("GET", "/health"):
        return None
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("nonce", [])
    if len(values) != 1 or not NONCE.fullmatch(values[0]):
        return None
    return values[0]


async def _read_body(receive: Receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _with_body(scope: Scope, receive: Receive, body: bytes) -> tuple[Scope, Receive]:
    headers = [(n, v) for n, v in scope["headers"] if n.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # the disconnect, when the client hangs up

    return {**scope, "headers": headers}, replay


async def _reply(send: Send, status: int, message: str, kind: str, code: str | None = None) -> None:
    await _send_json(send, status, {"error": {"message": message, "type": kind, "code": code}})


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument(
        "--fd", type=int, help="serve on this inherited listening socket, not --host/--port"
    )
    own, serve_args = parser.parse_known_args(argv)
    key = os.environ.pop(KEY_VARIABLE, "")  # the model's code has no use for it
    if not key:
        parser.error(f"set the key in {KEY_VARIABLE} (never on the command line: ps shows it)")

    import transformers.cli.serving.server as server_module
    from transformers.cli.transformers import main as transformers_main

    build_server = server_module.build_server

    def guarded_build_server(model_manager: Any, *args: Any, **kwargs: Any) -> Any:
        if model_manager.force_model is None:
            raise SystemExit("the guarded server serves exactly one model: name its checkpoint")
        return KeyGuard(
            build_server(model_manager, *args, **kwargs),
            key=key,
            served_model_name=own.served_model_name,
            checkpoint=model_manager.force_model,
        )

    server_module.build_server = guarded_build_server  # `Serve` imports it when it runs
    if own.fd is not None:
        _serve_on_inherited_socket(socket.socket(fileno=own.fd))
    sys.argv = ["transformers", "serve", *serve_args]
    return transformers_main() or 0


def _serve_on_inherited_socket(listener: socket.socket) -> None:
    """Make `transformers serve`'s uvicorn serve on `listener` (bound and listening already)
    instead of binding its `--host`/`--port`."""
    import uvicorn

    if (
        listener.type != socket.SOCK_STREAM
        or listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 1
    ):
        raise SystemExit("--fd must be a listening TCP socket")
    run = uvicorn.Server.run

    def run_on_listener(self: Any, sockets: Any = None) -> Any:
        return run(self, sockets=[listener])

    uvicorn.Server.run = run_on_listener  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main())
