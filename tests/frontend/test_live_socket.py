"""The livestream sockets: staff only, an event pushed as soon as it is committed, a dropped
page resuming after the last id it saw, the public socket never sending an event younger than
the delay, and a recording that survives a channel layer that fails or hangs."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.sessions import SessionMiddlewareStack
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents import trajectory_live
from agents.models import Agent, TrajectoryEvent
from agents.services import agent_create, token_issue
from agents.trajectory import tool_call_record
from arena.competition.models import Competition, CompetitionAgent
from frontend import live_consumers
from frontend.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)

application = SessionMiddlewareStack(URLRouter(websocket_urlpatterns))
STAFF_SOCKET = "/ws/organizer/agents/ann/live/"


def session_cookie(*, staff: bool) -> list[tuple[bytes, bytes]]:
    user = User.objects.create_user("org" if staff else "voter", password="x", is_staff=staff)
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


def tool_call(agent: Agent, command: str, output: str = "") -> TrajectoryEvent:
    return tool_call_record(agent=agent, report={"command": command, "output": output})


def event_at(agent: Agent, when: dt.datetime, command: str) -> TrajectoryEvent:
    payload = {"tool": "shell", "command": command, "output": "", "exit_code": 0}
    return TrajectoryEvent.objects.create(
        agent=agent, kind="tool_call", reported=True, payload=payload, size=100, created_at=when
    )


@pytest.fixture
def ann() -> Agent:
    return agent_create(name="ann", credit_limit=Decimal("300"))


async def opened(path: str, headers: list[tuple[bytes, bytes]] | None = None):
    socket = WebsocketCommunicator(application, path, headers=headers or [])
    connected, code = await socket.connect(timeout=20)
    return socket, connected, code


# -- who may watch ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_anonymous_visitors_non_staff_and_agents_tokens_are_refused(ann):
    token = await database_sync_to_async(token_issue)(agent=ann, kind="api")
    voter = await database_sync_to_async(session_cookie)(staff=False)
    for headers in ([], voter, [(b"authorization", f"Bearer {token}".encode())]):
        socket, connected, code = await opened(STAFF_SOCKET, headers)
        assert (connected, code) == (False, live_consumers.CLOSE_FORBIDDEN), headers
        await socket.disconnect()


@pytest.mark.asyncio
async def test_staff_get_an_event_pushed_within_a_second_of_its_commit(ann):
    staff = await database_sync_to_async(session_cookie)(staff=True)
    socket, connected, _ = await opened(STAFF_SOCKET, staff)
    assert connected

    started = time.monotonic()
    stored = await database_sync_to_async(tool_call)(ann, "python train.py", "<script>x</script>")
    frame = await socket.receive_json_from(timeout=20)
    latency = time.monotonic() - started

    assert frame["type"] == "event" and latency < 1
    event = frame["event"]
    assert (event["id"], event["kind"], event["reported"]) == (stored.pk, "tool_call", True)
    assert (event["command"], event["output"]) == ("python train.py", "<script>x</script>")
    print(f"[livestream] event on the socket {latency * 1000:.0f} ms after it was recorded")
    await socket.disconnect()


@pytest.mark.asyncio
async def test_an_event_published_from_a_thread_running_an_event_loop_is_pushed_too(ann):
    """Recorded by code on an event loop's thread (a browser driver's, an async worker's):
    the send is handed to that loop rather than blocking it or being dropped."""
    staff = await database_sync_to_async(session_cookie)(staff=True)
    socket, connected, _ = await opened(STAFF_SOCKET, staff)
    assert connected
    stored = await database_sync_to_async(event_at)(ann, timezone.now(), "from a loop")

    trajectory_live.event_publish(stored)  # on this test's own running loop

    frame = await socket.receive_json_from(timeout=20)
    assert (frame["type"], frame["event"]["id"]) == ("event", stored.pk)
    await socket.disconnect()


@pytest.mark.asyncio
async def test_an_unknown_agent_is_refused_even_to_staff(ann):
    staff = await database_sync_to_async(session_cookie)(staff=True)
    socket, connected, code = await opened("/ws/organizer/agents/nobody/live/", staff)
    assert (connected, code) == (False, live_consumers.CLOSE_NOT_FOUND)
    await socket.disconnect()


@pytest.mark.asyncio
async def test_a_page_resumes_after_the_last_id_it_saw_and_asks_for_more(ann):
    events = [await database_sync_to_async(tool_call)(ann, f"step {n}") for n in range(5)]
    staff = await database_sync_to_async(session_cookie)(staff=True)

    socket, connected, _ = await opened(f"{STAFF_SOCKET}?after={events[1].pk}", staff)
    assert connected
    caught_up = await socket.receive_json_from(timeout=20)
    assert caught_up["type"] == "events" and caught_up["more"] is False
    assert [e["command"] for e in caught_up["events"]] == ["step 2", "step 3", "step 4"]

    await socket.send_json_to({"type": "after", "id": events[3].pk})
    again = await socket.receive_json_from(timeout=20)
    assert [e["id"] for e in again["events"]] == [events[4].pk]
    await socket.send_json_to({"type": "after", "id": "0 or 1=1"})  # ignored, not an id
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


def test_a_catch_up_comes_a_page_at_a_time_and_says_more_waits(ann):
    events = [tool_call(ann, f"step {n}") for n in range(7)]
    page, more = trajectory_live.events_after(ann, after_id=0, limit=3)
    assert [e.pk for e in page] == [e.pk for e in events[:3]] and more is True
    page, more = trajectory_live.events_after(ann, after_id=events[5].pk, limit=3)
    assert [e.pk for e in page] == [events[6].pk] and more is False


@pytest.mark.asyncio
async def test_the_budget_and_journal_arrive_on_the_socket_and_follow_the_ledgers(ann, monkeypatch):
    monkeypatch.setattr(live_consumers, "STATUS_SECONDS", 0.2)
    staff = await database_sync_to_async(session_cookie)(staff=True)
    socket, connected, _ = await opened(STAFF_SOCKET, staff)
    assert connected
    first = await socket.receive_json_from(timeout=20)
    assert first["type"] == "status"
    credit = {bar["key"]: bar for bar in first["budget"]}["api_credit"]
    assert (credit["used"], credit["limit"]) == (0, 300)

    await database_sync_to_async(Agent.objects.filter(pk=ann.pk).update)(
        credit_spent=Decimal("150")
    )
    changed = await socket.receive_json_from(timeout=20)
    credit = {bar["key"]: bar for bar in changed["budget"]}["api_credit"]
    assert (credit["used"], credit["fraction"]) == (150, 0.5)
    await socket.disconnect()


# -- the public, delayed socket --------------------------------------------------------------


def public(agent: Agent, delay_minutes: int | None) -> None:
    competition = Competition.objects.create(
        name="c", base_model="/m/base", live_public_delay_minutes=delay_minutes
    )
    CompetitionAgent.objects.create(competition=competition, name=agent.name)


@pytest.mark.asyncio
async def test_the_public_socket_is_refused_while_the_view_is_off(ann):
    await database_sync_to_async(public)(ann, None)
    socket, connected, code = await opened("/ws/live/agents/ann/?after=0")
    assert (connected, code) == (False, live_consumers.CLOSE_NOT_FOUND)
    await socket.disconnect()


@pytest.mark.asyncio
async def test_the_public_socket_never_sends_an_event_younger_than_the_delay(ann, monkeypatch):
    monkeypatch.setattr(live_consumers, "PUBLIC_POLL_SECONDS", 0.1)
    await database_sync_to_async(public)(ann, 30)
    now = timezone.now()
    old = await database_sync_to_async(event_at)(ann, now - dt.timedelta(minutes=31), "old")
    await database_sync_to_async(event_at)(ann, now - dt.timedelta(minutes=29), "fresh")
    # Written after the fresh one but dated before it (a slow transaction): held back behind
    # it in id order, never skipped, never sent early.
    await database_sync_to_async(event_at)(ann, now - dt.timedelta(minutes=45), "late commit")

    staff = await database_sync_to_async(session_cookie)(staff=True)
    watcher, _, _ = await opened(STAFF_SOCKET, staff)
    socket, connected, _ = await opened("/ws/live/agents/ann/?after=0")
    assert connected
    first = await socket.receive_json_from(timeout=20)
    assert [(e["id"], e["command"]) for e in first["events"]] == [(old.pk, "old")]

    await database_sync_to_async(tool_call)(ann, "recorded while the public watches")
    pushed = await watcher.receive_json_from(timeout=20)
    assert pushed["type"] == "event"  # the staff socket got it at once; the public one:
    assert await socket.receive_nothing(timeout=1.0)
    await socket.disconnect()
    await watcher.disconnect()


@pytest.mark.asyncio
async def test_the_public_socket_sends_an_event_once_it_is_old_enough(ann, monkeypatch):
    monkeypatch.setattr(live_consumers, "PUBLIC_POLL_SECONDS", 0.1)
    await database_sync_to_async(public)(ann, 0)
    socket, connected, _ = await opened("/ws/live/agents/ann/?after=0")
    assert connected
    await database_sync_to_async(tool_call)(ann, "nvidia-smi")
    frame = await socket.receive_json_from(timeout=20)
    assert [e["command"] for e in frame["events"]] == ["nvidia-smi"]
    await socket.disconnect()


@pytest.mark.asyncio
async def test_public_sockets_past_the_process_bound_are_refused(ann, monkeypatch):
    monkeypatch.setattr(live_consumers, "MAX_PUBLIC_SOCKETS", 1)
    await database_sync_to_async(public)(ann, 30)
    first, connected, _ = await opened("/ws/live/agents/ann/?after=0")
    assert connected
    second, connected, code = await opened("/ws/live/agents/ann/?after=0")
    assert (connected, code) == (False, live_consumers.CLOSE_TOO_MANY)
    await first.disconnect()
    third, connected, _ = await opened("/ws/live/agents/ann/?after=0")
    assert connected, "a closed socket gives its place back"
    await third.disconnect()
    await second.disconnect()


# -- the push never breaks the recording -----------------------------------------------------


class BrokenLayer:
    def __init__(self, *, hang: bool) -> None:
        self.hang = hang

    async def group_send(self, group: str, message: dict) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        raise ConnectionError("the channel layer is down")


@pytest.mark.parametrize("hang", [False, True], ids=["failing", "hanging"])
def test_a_channel_layer_that_fails_or_hangs_never_breaks_the_recording(ann, monkeypatch, hang):
    monkeypatch.setattr(trajectory_live, "get_channel_layer", lambda: BrokenLayer(hang=hang))
    started = time.monotonic()
    stored = tool_call(ann, "echo still recorded")
    took = time.monotonic() - started

    assert stored is not None
    assert TrajectoryEvent.objects.filter(pk=stored.pk, payload__command="echo still recorded")
    assert took < trajectory_live.PUBLISH_TIMEOUT_S + 1.0


def test_a_rolled_back_event_is_never_pushed(ann, monkeypatch):
    from django.db import transaction

    pushed: list[int] = []
    monkeypatch.setattr(trajectory_live, "event_publish", lambda event: pushed.append(event.pk))
    with pytest.raises(RuntimeError), transaction.atomic():
        tool_call(ann, "undone")
        raise RuntimeError("the request failed after recording")
    kept = tool_call(ann, "kept")
    assert pushed == [kept.pk]
