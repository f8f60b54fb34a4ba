"""The agent gateway: on AGENTS_GATEWAY_PORT the site answers the agent API and the proxy only.

The agent API, the proxy and the voters' site are one Django app in one daphne process, which
listens on two ports. Agents' configs name the gateway port, and the firewall
(agents/firewall.py) keeps agents' Unix users off the voters' port, so from an agent's shell
the admin, the organizer's pages, the voting pages and the WebSockets do not exist. The port a
request arrived on is the listening socket's (the ASGI scope's `server`), never a header the
client wrote.

Only `/api/v1/` (the agent API) and `/proxy/v1/` (the proxy) pass: the voters' own endpoints
under `/api/` (`/api/battles`, `/api/leaderboard`, ...) do not. Django routes on `path_info`,
the path less the ASGI `root_path`, and daphne takes that root path from a header the client
writes (`Daphne-Root-Path`): on the gateway the root path is forced empty before Django sees
the request (`gateway_scope`), and the middleware checks both `path` and `path_info`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound

AGENT_PATHS = ("/api/v1/", "/proxy/v1/")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def on_gateway(server_port: object) -> bool:
    return str(server_port) == str(settings.AGENTS_GATEWAY_PORT)


def agents_gateway(get_response: Callable[[HttpRequest], HttpResponse]):
    """Django middleware: 404 for every path but the agent API and the proxy on the gateway."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if on_gateway(request.META.get("SERVER_PORT")) and not (
            request.path.startswith(AGENT_PATHS) and request.path_info.startswith(AGENT_PATHS)
        ):
            return HttpResponseNotFound(
                b"Not found: this port serves the agent API (/api/v1/) and the proxy (/proxy/v1/).\n",
                content_type="text/plain",
            )
        return get_response(request)

    return middleware


def gateway_scope(app: ASGIApp) -> ASGIApp:
    """ASGI wrapper: on the gateway port the root path is always empty. Daphne fills
    `scope["root_path"]` from the client's `Daphne-Root-Path` header, and Django routes on the
    path less that prefix: `/api/admin/` with `Daphne-Root-Path: /api` would be the admin."""

    async def scoped(scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") or (None, None)
        if scope["type"] in {"http", "websocket"} and on_gateway(server[1]):
            scope = {**scope, "root_path": ""}
        await app(scope, receive, send)

    return scoped


def websockets_off_gateway(app: ASGIApp) -> ASGIApp:
    """ASGI wrapper for the WebSocket stack: a connection to the gateway port is refused
    before any consumer, session or database sees it (daphne answers the handshake 403)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") or (None, None)
        if scope["type"] == "websocket" and on_gateway(server[1]):
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        await app(scope, receive, send)

    return guarded
