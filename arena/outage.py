"""A database outage answers 503 with a message asking to retry, never a bare 500.

When PostgreSQL restarts (or a connection is cut), requests in flight fail with Django's
`OperationalError` / `InterfaceError`. Nothing was acknowledged, so the honest answer is
"try again in a moment": HTTP 503 with `Retry-After`, as JSON for the API and the voters'
JSON endpoints and as a short page for everything else. Django reconnects by itself on the
next request (`CONN_HEALTH_CHECKS`, and `close_old_connections` around each request and each
Channels database call), so the site recovers as soon as the database is back.

Three places catch it, because Django turns an exception into a response at each layer:
- `DatabaseOutageMiddleware.process_exception`: an error in a view (sync or async handler);
- `server_error` (`handler500`): an error in a middleware, e.g. the session saved on the way
  out;
- `websocket_database_outage`: a WebSocket consumer, which is closed with 1013 ("try again
  later") instead of a server error.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from arena.proxy_headers import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

DATABASE_OUTAGE_ERRORS = (OperationalError, InterfaceError)
OUTAGE_MESSAGE = "The arena's database is briefly unavailable. Please try again in a few seconds."
OUTAGE_CODE = "database_unavailable"
# WebSocket close code 1013: "Try Again Later" (RFC 6455 registry).
WEBSOCKET_TRY_AGAIN_LATER = 1013
# Paths whose clients read JSON: the voters' endpoints, the agent API, the proxy.
JSON_PATHS = ("/api/", "/proxy/")

_OUTAGE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Please try again</title></head>
<body><h1>Please try again in a moment</h1><p>{message}</p></body></html>
"""


def is_database_outage(error: BaseException | None) -> bool:
    """The error, or one it was raised from, is the database being unreachable."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, DATABASE_OUTAGE_ERRORS):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def _wants_json(request: HttpRequest) -> bool:
    if request.path.startswith(JSON_PATHS):
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def outage_response(request: HttpRequest) -> HttpResponse:
    response: HttpResponse
    if _wants_json(request):
        response = JsonResponse({"error": OUTAGE_MESSAGE, "code": OUTAGE_CODE}, status=503)
    else:
        response = HttpResponse(
            _OUTAGE_PAGE.format(message=OUTAGE_MESSAGE),
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(settings.ARENA_OUTAGE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


def _log_outage(request: HttpRequest, error: BaseException) -> None:
    # One line, not a traceback per request: during a restart every request fails the same way.
    log.warning(
        "database unavailable, answered 503 for %s %s: %s", request.method, request.path, error
    )


class DatabaseOutageMiddleware:
    """A view that fails because the database is unreachable answers 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_database_outage(exception):
            return None
        _log_outage(request, exception)
        return outage_response(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """`handler500`: an outage raised by a middleware answers 503, anything else Django's 500."""
    error = sys.exc_info()[1]
    if is_database_outage(error):
        assert error is not None
        _log_outage(request, error)
        return outage_response(request)
    return defaults.server_error(request)


def websocket_database_outage(app: ASGIApp) -> ASGIApp:
    """ASGI wrapper for WebSockets: a consumer that fails because the database is unreachable
    closes the socket with 1013 (try again later); the browser's page reconnects."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await app(scope, receive, send)
            return
        closed = False

        async def tracking_send(message: Any) -> None:
            nonlocal closed
            if message.get("type") == "websocket.close":
                closed = True
            await send(message)

        try:
            await app(scope, receive, tracking_send)
        except Exception as error:
            if not is_database_outage(error):
                raise
            log.warning("database unavailable, closed WebSocket %s: %s", scope.get("path"), error)
            if not closed:
                await send({"type": "websocket.close", "code": WEBSOCKET_TRY_AGAIN_LATER})

    return guarded
