"""The trajectory as it happens: each stored event pushed to the channel-layer group of its
agent once its transaction commits, and the bounded reads the livestream pages need.

An event travels as a *frame*: its id, time, kind, observed/reported, and the fields a person
reads (a tool call's command, output, exit code and duration; a model call's last message,
reply, tokens and cost; an API call's method, path and status), every text cut to
`FRAME_TEXT_CHARS`. Frames hold only text, numbers and booleans: the pages insert them with
`textContent`, so an agent's `<script>` is shown, never run.

Publishing never breaks the recording (which must never break the call it records): it runs
after the commit, is bounded by `PUBLISH_TIMEOUT_S`, and logs any failure. A page that missed
a push (a dropped socket, a channel layer down) asks for the events after the last id it saw,
so the database, not the channel layer, is the record.

The public view is delayed: `until` on every read here is the newest `created_at` it may see,
and `events_after` stops at the first event younger than that, in id order, so an event that
is still too fresh holds back the ones after it rather than being skipped.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from agents.models import Agent, TrajectoryEvent
from agents.text_cut import cut

logger = logging.getLogger(__name__)

FRAME_TEXT_CHARS = 4000
PAGE_EVENTS = 200  # the most events one read returns: a page load, a resume, a page back
PUBLISH_TIMEOUT_S = 1.0


def live_group(agent_id: int) -> str:
    """The channel-layer group of one agent's livestream (staff sockets only)."""
    return f"trajectory.agent.{int(agent_id)}"


# --- frames -----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Any payload value as bounded text; structures as their JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return cut(value, FRAME_TEXT_CHARS)
    return cut(json.dumps(value, ensure_ascii=False, default=str), FRAME_TEXT_CHARS)


def _commands(value: Any) -> str:
    """Proposed commands, one block after another ("" for none)."""
    if not isinstance(value, list):
        return ""
    return _text("\n\n".join(c for c in value if isinstance(c, str)) or None)


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _last_message(messages: Any) -> dict[str, str]:
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return {"role": "", "content": ""}
    last = messages[-1]
    return {"role": _text(last.get("role"))[:20], "content": _text(last.get("content"))}


def event_frame(event: TrajectoryEvent, *, public: bool = False) -> dict[str, Any]:
    """What a page shows of one event. `public` leaves out the money (a model call's cost)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    frame: dict[str, Any] = {
        "id": event.pk,
        "at": event.created_at.astimezone(dt.UTC).isoformat(timespec="milliseconds"),
        "kind": event.kind,
        "reported": bool(event.reported),
    }
    if event.kind == TrajectoryEvent.Kind.TOOL_CALL:
        frame.update(
            tool=_text(payload.get("tool"))[:100],
            command=_text(payload.get("command")),
            output=_text(payload.get("output")),
            exit_code=_number(payload.get("exit_code")),
            duration_s=_number(payload.get("duration_s")),
        )
    elif event.kind == TrajectoryEvent.Kind.MODEL_CALL:
        frame.update(
            model=_text(payload.get("model"))[:200],
            last_message=_last_message(payload.get("messages")),
            reply=_text(payload.get("reply")),
            proposed_commands=_commands(payload.get("proposed_commands")),
            tool_calls=_text(payload.get("tool_calls") or None),
            status=_number(payload.get("status")),
            prompt_tokens=_number(payload.get("prompt_tokens")),
            completion_tokens=_number(payload.get("completion_tokens")),
            latency_ms=_number(payload.get("latency_ms")),
            error=_text(payload.get("error")),
        )
        if not public:
            frame["cost_usd"] = _text(payload.get("cost_usd"))[:40]
    elif event.kind == TrajectoryEvent.Kind.API_CALL:
        frame.update(
            method=_text(payload.get("method"))[:16],
            path=_text(payload.get("path"))[:500],
            status=_number(payload.get("status")),
            duration_ms=_number(payload.get("duration_ms")),
        )
    else:  # a kind this page does not know yet: its payload as text
        frame["content"] = _text(payload)
    return frame


# --- reads ------------------------------------------------------------------------------------


def _bounded(limit: int) -> int:
    return max(1, min(int(limit), PAGE_EVENTS))


def events_latest(
    agent: Agent, *, until: dt.datetime | None = None, limit: int = PAGE_EVENTS
) -> list[TrajectoryEvent]:
    """The agent's latest events (none younger than `until`), oldest first."""
    events = TrajectoryEvent.objects.filter(agent=agent)
    if until is not None:
        events = events.filter(created_at__lte=until)
    return list(reversed(events.order_by("-id")[: _bounded(limit)]))


def events_before(
    agent: Agent, *, before_id: int, until: dt.datetime | None = None, limit: int = PAGE_EVENTS
) -> list[TrajectoryEvent]:
    """The page back: the events just before `before_id`, oldest first."""
    events = TrajectoryEvent.objects.filter(agent=agent, id__lt=before_id)
    if until is not None:
        events = events.filter(created_at__lte=until)
    return list(reversed(events.order_by("-id")[: _bounded(limit)]))


def events_after(
    agent: Agent, *, after_id: int, until: dt.datetime | None = None, limit: int = PAGE_EVENTS
) -> tuple[list[TrajectoryEvent], bool]:
    """The events after `after_id`, oldest first, and whether more are waiting. With `until`,
    the run stops at the first event younger than it (see the module's note)."""
    limit = _bounded(limit)
    events = list(
        TrajectoryEvent.objects.filter(agent=agent, id__gt=after_id).order_by("id")[: limit + 1]
    )
    if until is not None:
        fresh = next((i for i, event in enumerate(events) if event.created_at > until), None)
        if fresh is not None:
            return events[: min(fresh, limit)], False
    return events[:limit], len(events) > limit


# --- the push ---------------------------------------------------------------------------------


async def _send_bounded(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await asyncio.wait_for(layer.group_send(group, message), timeout=PUBLISH_TIMEOUT_S)


_sending: set[asyncio.Task[None]] = set()  # sends handed to a running loop, kept till done


def _log_failed_send(task: asyncio.Task[None]) -> None:
    _sending.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("trajectory: could not push an event: %r", task.exception())


def event_publish(event: TrajectoryEvent) -> None:
    """Push a committed event to its agent's staff sockets. Never raises."""
    try:
        group = live_group(event.agent_id)
        message = {"type": "trajectory.event", "event": event_frame(event)}
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            async_to_sync(_send_bounded)(group, message)
        else:  # called on a thread that runs an event loop: hand it the send, never block it
            task = loop.create_task(_send_bounded(group, message))
            _sending.add(task)
            task.add_done_callback(_log_failed_send)
    except Exception:  # the event is stored; a page that missed it asks for it by id
        logger.warning(
            "trajectory: could not push event %s to the livestream", event.pk, exc_info=True
        )
