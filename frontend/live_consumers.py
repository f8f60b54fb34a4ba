"""The agents' livestream sockets.

`ws/organizer/agents/NAME/live/[?after=ID]` (staff): the session's user must be active staff,
checked here as on the page (the socket is not behind the page's decorator). It joins the
agent's group (`agents.trajectory_live.live_group`), so every event stored from then on is
pushed within the commit's round trip; `?after=ID` and the message `{"type": "after", "id":
ID}` send the stored events after ID a page at a time (`more` says another page waits), which
is how a page resumes after a dropped socket. Every `STATUS_SECONDS` it sends the budget bars
and the journal's latest entries, when they changed.

`ws/live/agents/NAME/[?after=ID]` (anyone, when the competition has the public view on): never
joins the group. It reads the database every `PUBLIC_POLL_SECONDS` for events older than
now − delay, the delay read afresh each time (switched off: the socket closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db.models import Max
from django.utils import timezone

from agents.models import Agent, TrajectoryEvent
from agents.trajectory_live import event_frame, events_after, live_group
from frontend.live import journal_latest, live_budget_of, public_delay

log = logging.getLogger(__name__)

STATUS_SECONDS = 3.0
PUBLIC_POLL_SECONDS = 2.0
MAX_PUBLIC_SOCKETS = 500
CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_TOO_MANY = 4403, 4404, 4429


def _after_param(scope: dict[str, Any]) -> int | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after", [])
    raw = values[0] if values else ""
    return int(raw) if raw.isdigit() and len(raw) <= 19 else None


def _agent_named(name: str) -> Agent | None:
    return Agent.objects.filter(name=name).first()


def _page_after(
    agent: Agent, after_id: int, until: dt.datetime | None, public: bool
) -> tuple[list[dict[str, Any]], bool]:
    events, more = events_after(agent, after_id=after_id, until=until)
    return [event_frame(event, public=public) for event in events], more


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class AgentLiveConsumer(AsyncJsonWebsocketConsumer):
    """An organizer watching one agent, live."""

    group: str | None = None
    status_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = await get_user(self.scope)
        if not (user.is_authenticated and user.is_active and user.is_staff):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        name = self.scope["url_route"]["kwargs"]["name"]
        self.agent = await database_sync_to_async(_agent_named)(name)
        if self.agent is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        # Joined before the catch-up is read, so nothing falls between them (the page drops
        # an id it already shows).
        self.group = live_group(self.agent.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        after = _after_param(self.scope)
        if after is not None:
            await self._send_after(after)
        self.status_task = asyncio.create_task(self._send_status_while_open())

    async def disconnect(self, code: int) -> None:
        await _stop(self.status_task)
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "after":
            after = content.get("id")
            if isinstance(after, int) and not isinstance(after, bool) and after >= 0:
                await self._send_after(after)

    async def trajectory_event(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "event", "event": message["event"]})

    async def _send_after(self, after_id: int) -> None:
        frames, more = await database_sync_to_async(_page_after)(self.agent, after_id, None, False)
        await self.send_json({"type": "events", "events": frames, "more": more})

    async def _send_status_while_open(self) -> None:
        last: dict[str, Any] | None = None
        while True:
            await asyncio.sleep(STATUS_SECONDS)
            try:
                status = await database_sync_to_async(self._status)()
            except Exception:  # a failed read skips one update; the stream goes on
                log.exception("livestream: could not read %s's budget", self.agent.name)
                continue
            if status != last:
                await self.send_json({"type": "status", **status})
                last = status

    def _status(self) -> dict[str, Any]:
        return {"budget": live_budget_of(self.agent.pk), "journal": journal_latest(self.agent)}


class PublicLiveConsumer(AsyncJsonWebsocketConsumer):
    """Anyone watching one agent, `live_public_delay_minutes` late. Each socket reads the
    database every few seconds, so one process holds at most `MAX_PUBLIC_SOCKETS` of them."""

    task: asyncio.Task[None] | None = None
    open_sockets = 0  # in this process
    counted = False

    async def connect(self) -> None:
        name = self.scope["url_route"]["kwargs"]["name"]
        delay = await database_sync_to_async(public_delay)(name)
        agent = await database_sync_to_async(_agent_named)(name) if delay is not None else None
        if agent is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        if PublicLiveConsumer.open_sockets >= MAX_PUBLIC_SOCKETS:
            await self.close(code=CLOSE_TOO_MANY)
            return
        PublicLiveConsumer.open_sockets += 1  # no await since the check: no other socket between
        self.counted = True
        self.agent = agent
        await self.accept()
        self.task = asyncio.create_task(self._follow(_after_param(self.scope)))

    async def disconnect(self, code: int) -> None:
        if self.counted:
            PublicLiveConsumer.open_sockets -= 1
            self.counted = False
        await _stop(self.task)

    async def _follow(self, after: int | None) -> None:
        if after is None:  # a socket that names no id hears only what comes from now on
            after = await database_sync_to_async(_latest_id)(self.agent)
        while True:
            try:
                delay = await database_sync_to_async(public_delay)(self.agent.name)
                if delay is None:  # switched off while watching
                    await self.close(code=CLOSE_NOT_FOUND)
                    return
                frames, more = await database_sync_to_async(_page_after)(
                    self.agent, after, timezone.now() - delay, True
                )
            except Exception:  # a failed read skips one round; the next one tries again
                log.exception("public livestream: could not read %s's events", self.agent.name)
                frames, more = [], False
            if frames:
                await self.send_json({"type": "events", "events": frames, "more": False})
                after = frames[-1]["id"]
            if not more:
                await asyncio.sleep(PUBLIC_POLL_SECONDS)


def _latest_id(agent: Agent) -> int:
    return TrajectoryEvent.objects.filter(agent=agent).aggregate(latest=Max("id"))["latest"] or 0
