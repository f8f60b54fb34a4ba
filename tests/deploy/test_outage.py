"""A database outage answers 503 with a message asking to retry (arena/outage.py).

The whole path, with a real PostgreSQL outage behind nginx, is in test_kit.py; here each of
the three places that catch it is checked on its own."""

import asyncio
import json

import pytest
from django.db import OperationalError
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path

from arena.outage import WEBSOCKET_TRY_AGAIN_LATER, websocket_database_outage


def database_down(request):
    raise OperationalError("connection failed: server closed the connection unexpectedly")


def broken_code(request):
    raise ValueError("a bug")


urlpatterns = [
    path("api/battles", database_down),
    path("page", database_down),
    path("bug", broken_code),
]
handler500 = "arena.outage.server_error"


class SessionStoreDown:
    """A middleware whose own work needs the database (as the session middleware's save)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path == "/middleware":
            raise OperationalError("terminating connection due to administrator command")
        return response


def ok(request):
    return HttpResponse("ok")


urlpatterns.append(path("middleware", ok))

pytestmark = pytest.mark.urls(__name__)


def client() -> Client:
    return Client(raise_request_exception=False)


def test_a_json_endpoint_answers_503_json_with_retry_after():
    response = client().post("/api/battles", {}, content_type="application/json")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert json.loads(response.content) == {
        "error": "The arena's database is briefly unavailable. Please try again in a few seconds.",
        "code": "database_unavailable",
    }


def test_a_page_answers_503_html_asking_to_retry():
    response = client().get("/page")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert b"try again" in response.content
    assert response["Retry-After"] == "5"


@override_settings(
    MIDDLEWARE=["tests.deploy.test_outage.SessionStoreDown"], ARENA_OUTAGE_RETRY_AFTER_S=2
)
def test_an_outage_inside_a_middleware_answers_503_too():
    response = client().get("/middleware")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"


def test_other_errors_are_still_500():
    assert client().get("/bug").status_code == 500


def test_a_websocket_consumer_cut_off_by_the_outage_is_closed_try_again_later():
    sent: list[dict] = []

    async def consumer(scope, receive, send):
        raise OperationalError("the database system is shutting down")

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    asyncio.run(websocket_database_outage(consumer)({"type": "websocket"}, receive, send))
    assert sent == [{"type": "websocket.close", "code": WEBSOCKET_TRY_AGAIN_LATER}]
