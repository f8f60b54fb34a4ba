"""An agent's trajectory, recorded by the platform outside the agent's sandbox.

Three kinds of event go to `TrajectoryEvent` (append-only in PostgreSQL):
- `model_call`: the proxy saw it (model, the last request messages, the reply, tokens, cost,
  status, latency);
- `api_call`: the agent API saw it (method, path, status, duration, a redacted summary of the
  body; never a token);
- `tool_call`: either the platform's own harness (`agents.harness`) ran it as the agent's
  user and saw it (`tool_call_observed`), or an agent's harness reported it
  (`POST /api/v1/trajectory/events`, `tool_call_record`): the platform did not see that
  command run, so the event is marked `reported`.

Every event is bounded (`MAX_EVENT_BYTES`: long strings are cut, head and tail kept, and the
cut is said in the text), and so is each agent's day, in budgets of their own (`BUDGETS`,
`day_bounds`): the proxy's model calls, the platform harness's tool calls, the API's records of
calls (their size is the agent's to choose), and what the agent reports (its tool calls, and the
API's records of the calls that carried them). A flood of one never crowds out another. Past a
budget's bounds events are dropped and counted on `TrajectoryDay` (`dropped`, and by budget).
Recording never breaks the call it records: the `*_record` functions the proxy and the API
call log a failure and return None.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.http import HttpRequest
from django.utils import timezone

from agents import trajectory_live
from agents.models import Agent, TrajectoryDay, TrajectoryEvent
from agents.text_cut import cut
from arena.json_api import strict_json_loads

logger = logging.getLogger(__name__)

MAX_EVENT_BYTES = 32 * 1024
STRING_CHARS = 4000  # the first cut of any one string; halved until the event fits
KEPT_MESSAGES = 8  # a model call's last messages (each call resends the whole conversation)
REPLY_CHARS = 16_000  # what is collected of a reply, streamed or whole
MAX_BODY_BYTES = 1024 * 1024  # an API body larger than this is recorded by its size only
SUMMARY_KEYS, SUMMARY_ITEMS, SUMMARY_DEPTH = 40, 20, 4
MIB = 1024 * 1024
# Each budget: its settings' prefix (`<prefix>_EVENTS`, `<prefix>_BYTES`) and default bounds of a
# UTC day; its counters are `TrajectoryDay.<budget>_events`, `_bytes` and `_dropped`.
BUDGETS = {
    "model": ("AGENTS_TRAJECTORY_MODEL_DAY", 20_000, 64 * MIB),  # the proxy's model calls
    "tool": ("AGENTS_TRAJECTORY_TOOL_DAY", 20_000, 32 * MIB),  # the platform harness's
    "api": ("AGENTS_TRAJECTORY_API_DAY", 20_000, 32 * MIB),  # the agent API's records
    "reported": ("AGENTS_TRAJECTORY_REPORTED_DAY", 10_000, 32 * MIB),  # the agent's reports
}

# Key names whose values never enter the record, and the platform's own token format
# (`arena_<kind>_<secret>`, agents.services.token_issue) wherever it appears in a value.
_SECRET_KEY = re.compile(r"token|secret|passw|api[_-]?key|authori[sz]ation|credential|cookie", re.I)
_TOKEN = re.compile(r"arena_[a-z]+_[A-Za-z0-9_-]{8,}")
REDACTED = "[redacted]"


class TrajectoryDayFull(Exception):
    """The agent's trajectory reached its bound for the day; the event was not recorded."""

    code = "trajectory_full"


def day_bounds(budget: str) -> tuple[int, int]:
    """(events, bytes) the platform keeps of one budget (`BUDGETS`) of an agent in one UTC day;
    settings may lower or raise them."""
    prefix, events, volume = BUDGETS[budget]
    return (
        getattr(settings, f"{prefix}_EVENTS", events),
        getattr(settings, f"{prefix}_BYTES", volume),
    )


# --- bounding ---------------------------------------------------------------------------------


def _storable(text: str) -> str:
    """Text PostgreSQL's jsonb takes: no NUL character, no lone surrogate (an agent's JSON may
    hold both, as `\\u0000` and `\\ud800`)."""
    return text.replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")


def _shrunk(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _storable(cut(value, limit))
    if isinstance(value, dict):
        return {_storable(str(key)): _shrunk(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_shrunk(item, limit) for item in value]
    return value


def _fitted(payload: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The payload cut until its JSON is at most MAX_EVENT_BYTES, and that size."""
    limit = STRING_CHARS
    while True:
        fitted = _shrunk(payload, limit)
        size = len(json.dumps(fitted, ensure_ascii=False).encode())
        if size <= MAX_EVENT_BYTES:
            return fitted, size
        if limit <= 16:  # so many fields that even short strings overflow: keep what it was
            fitted = {
                "cut": f"the event's {size} bytes exceed {MAX_EVENT_BYTES}",
                "keys": [cut(str(key), 100) for key in list(payload)[:SUMMARY_KEYS]],
            }
            return fitted, len(json.dumps(fitted).encode())
        limit //= 2


def redacted_summary(value: Any, depth: int = 0) -> Any:
    """A bounded copy of a JSON value: secret-named keys and platform tokens replaced, at most
    SUMMARY_KEYS keys and SUMMARY_ITEMS items a level, SUMMARY_DEPTH levels deep."""
    if isinstance(value, str):
        return _TOKEN.sub(REDACTED, value)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if depth >= SUMMARY_DEPTH:
        return f"[{type(value).__name__} nested too deep]"
    if isinstance(value, dict):
        summary = {
            cut(str(key), 100): REDACTED
            if _SECRET_KEY.search(str(key)[:100])
            else redacted_summary(item, depth + 1)
            for key, item in list(value.items())[:SUMMARY_KEYS]
        }
        if len(value) > SUMMARY_KEYS:
            summary["…"] = f"{len(value) - SUMMARY_KEYS} more keys"
        return summary
    if isinstance(value, list):
        items = [redacted_summary(item, depth + 1) for item in value[:SUMMARY_ITEMS]]
        if len(value) > SUMMARY_ITEMS:
            items.append(f"… {len(value) - SUMMARY_ITEMS} more items")
        return items
    return f"[{type(value).__name__}]"


# --- appending --------------------------------------------------------------------------------


def _append(
    *, agent: Agent, kind: str, reported: bool, payload: dict[str, Any], budget: str
) -> TrajectoryEvent:
    """Append one event, counted against the agent's day in `budget` (`BUDGETS`); events the
    platform observes are also counted together (`events`, `bytes`). Raises TrajectoryDayFull
    past the budget's bounds (and counts the drop, in the budget and in all)."""
    payload, size = _fitted(payload)
    now = timezone.now()
    day = now.astimezone(UTC).date()
    max_events, max_bytes = day_bounds(budget)
    events, volume = f"{budget}_events", f"{budget}_bytes"
    counts = {events: F(events) + 1, volume: F(volume) + size}
    if budget != "reported":
        counts |= {"events": F("events") + 1, "bytes": F("bytes") + size}
    with transaction.atomic():  # a savepoint inside a request's own transaction
        TrajectoryDay.objects.get_or_create(agent=agent, day=day)
        counted = TrajectoryDay.objects.filter(
            agent=agent,
            day=day,
            **{f"{events}__lt": max_events, f"{volume}__lte": max_bytes - size},
        ).update(**counts)
        if counted:
            event = TrajectoryEvent.objects.create(
                agent=agent, kind=kind, reported=reported, payload=payload, size=size,
                created_at=now,
            )  # fmt: skip
            # Watchers hear of it only once it is committed; a rolled-back event never shows.
            transaction.on_commit(lambda: _publish(event), robust=True)
            return event
        dropped = f"{budget}_dropped"
        TrajectoryDay.objects.filter(agent=agent, day=day).update(
            dropped=F("dropped") + 1, **{dropped: F(dropped) + 1}
        )
    raise TrajectoryDayFull(  # after the savepoint: the dropped count stays
        f"{agent.name}'s trajectory holds its {max_events} events or {max_bytes} bytes of"
        f" {budget} for {day}; the event was dropped"
    )


def _publish(event: TrajectoryEvent) -> None:
    trajectory_live.event_publish(event)  # it never raises


def _observed(
    *, agent: Agent, kind: str, payload: dict[str, Any], budget: str
) -> TrajectoryEvent | None:
    """Append what the platform saw; a failure is logged, never raised into the call."""
    try:
        return _append(agent=agent, kind=kind, reported=False, payload=payload, budget=budget)
    except TrajectoryDayFull as full:
        logger.warning("trajectory: %s", full)
    except Exception:  # recording must never break the call it records
        logger.exception("trajectory: could not record %s of %s", kind, agent.name)
    return None


# --- model calls (the proxy) --------------------------------------------------------------------


class ReplyCollector:
    """The text and tool calls of a model's reply, whole or streamed, up to REPLY_CHARS."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.cut = False
        self.tool_calls: dict[int, dict[str, str]] = {}  # by index: streams send them in pieces

    def add_text(self, text: Any) -> None:
        if not isinstance(text, str) or not text:
            return
        room = REPLY_CHARS - self.size
        if len(text) > room:
            text, self.cut = text[: max(room, 0)], True
        self.parts.append(text)
        self.size += len(text)

    def _add_tool_calls(self, calls: Any) -> None:
        """Tool calls, whole or as stream pieces (`index` says which call a piece extends)."""
        if not isinstance(calls, list):
            return
        for call in calls[:SUMMARY_ITEMS]:
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            self.add_tool_piece(
                call.get("index", len(self.tool_calls)),
                id=call.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments"),
            )

    def add_tool_piece(
        self, index: Any, *, id: Any = None, name: Any = None, arguments: Any = None
    ) -> None:
        """A tool call, or a piece of one: the strings given extend the call at `index`."""
        if not isinstance(index, int) or isinstance(index, bool):
            return
        if not 0 <= index < SUMMARY_ITEMS:
            return
        merged = self.tool_calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        for key, piece in {"id": id, "name": name, "arguments": arguments}.items():
            if isinstance(piece, str) and len(merged[key]) < REPLY_CHARS:
                merged[key] += piece

    def calls(self) -> list[dict[str, str]]:
        return [self.tool_calls[index] for index in sorted(self.tool_calls)]

    def _add_first_choice(self, data: dict[str, Any], part: str) -> None:
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            said = choices[0].get(part)
            if isinstance(said, dict):
                self.add_text(said.get("content"))
                self._add_tool_calls(said.get("tool_calls"))

    def add_completion(self, data: dict[str, Any]) -> None:
        """A whole answer: its first choice's message."""
        self._add_first_choice(data, "message")

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """One streamed chunk: its first choice's delta."""
        self._add_first_choice(chunk, "delta")

    def text(self) -> str:
        return "".join(self.parts) + ("…[reply cut]" if self.cut else "")


def _message_text(content: Any) -> Any:
    """A message's content as text: a list of parts becomes its text parts, others named."""
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) and part.get("type") == "text"
            else f"[{part.get('type', 'part') if isinstance(part, dict) else 'part'}]"
            for part in content[:SUMMARY_ITEMS]
        )  # fmt: skip
    return content


# A fenced block of shell in a reply: what a scaffold that parses commands out of the model's
# text (mini-swe-agent's ```bash blocks) runs next, though the platform does not see it run.
SHELL_FENCES = frozenset({"", "bash", "sh", "shell", "console", "zsh"})
PROPOSED_COMMANDS = 8


def proposed_commands(reply: str) -> list[str]:
    """The shell commands a model's reply proposes in fenced blocks (```bash, or unlabelled),
    the first few, each bounded. Fences are read line by line, as Markdown reads them."""
    found: list[str] = []
    fence: str | None = None  # the open block's info string
    lines: list[str] = []
    for line in reply[:REPLY_CHARS].splitlines():
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence, lines = stripped[3:].strip().lower(), []
            continue
        if stripped.startswith("```"):
            command = "\n".join(lines).strip()
            if fence in SHELL_FENCES and command:
                found.append(command[:2000])
                if len(found) == PROPOSED_COMMANDS:
                    break
            fence = None
        else:
            lines.append(line)
    return found


def _kept_messages(body: bytes) -> tuple[int, list[dict[str, Any]]]:
    """How many messages the request held, and the system prompt plus the last KEPT_MESSAGES."""
    try:
        messages = strict_json_loads(body).get("messages")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return 0, []
    return _kept(messages)


def _kept(messages: Any) -> tuple[int, list[dict[str, Any]]]:
    if not isinstance(messages, list):
        return 0, []
    chosen = messages[-KEPT_MESSAGES:]
    first = messages[0] if messages else None
    if len(messages) > KEPT_MESSAGES and isinstance(first, dict) and first.get("role") == "system":
        chosen = [first, *chosen]
    kept = []
    for message in chosen:
        if not isinstance(message, dict):
            continue
        entry = {"role": str(message.get("role", ""))[:20]}
        entry["content"] = redacted_summary(_message_text(message.get("content")))
        for extra in ("tool_calls", "tool_call_id", "name"):
            if extra in message:
                entry[extra] = redacted_summary(message[extra])
        kept.append(entry)
    return len(messages), kept


def model_call_record(
    *,
    agent: Agent,
    model: str,
    request_body: bytes,
    reply: ReplyCollector,
    status: int,
    prompt_tokens: int,
    completion_tokens: int,
    cost_usd: Decimal,
    latency_ms: int,
    error: str = "",
    budget: str = "api",
    protocol: str = "chat",
    request_messages: list[Any] | None = None,
) -> TrajectoryEvent | None:
    """Record a model call the proxy settled, with the ledger that paid for it (`api`: the
    agent's API credit; `scaffold`: its harness's own budget). `request_messages`: the
    request as chat messages, for a protocol whose body holds none (else read from the body's
    `messages`). Never raises."""
    try:
        if request_messages is None:
            count, kept = _kept_messages(request_body)
        else:
            count, kept = _kept(request_messages)
        payload = {
            "model": model,
            "protocol": protocol,
            "messages_in_request": count,
            "messages": kept,
            "reply": reply.text(),
            "proposed_commands": redacted_summary(proposed_commands(reply.text())),
            "tool_calls": redacted_summary(reply.calls()),
            "status": status,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cost_usd": str(cost_usd),
            "budget": budget,
            "latency_ms": latency_ms,
            "error": error,
        }
    except Exception:
        logger.exception("trajectory: could not read the model call of %s", agent.name)
        return None
    return _observed(
        agent=agent, kind=str(TrajectoryEvent.Kind.MODEL_CALL), payload=payload, budget="model"
    )


# --- platform API calls (the agent API) ---------------------------------------------------------


def _body_summary(request: HttpRequest) -> Any:
    try:
        body = request.body
    except Exception:  # a body already read as a stream: say so rather than fail
        return "[body not readable]"
    if not body:
        return None
    if len(body) > MAX_BODY_BYTES:
        return f"[{len(body)} bytes, not summarised]"
    try:
        return redacted_summary(strict_json_loads(body))
    except (ValueError, UnicodeDecodeError):
        return f"[{len(body)} bytes, not JSON]"


def api_call_record(
    *, agent: Agent, request: HttpRequest, status: int, duration_ms: int, with_body: bool = True
) -> TrajectoryEvent | None:
    """Record a call of the agent API: never its headers (the token), the body only as a
    redacted summary. The records have a budget of their own (`api`): the agent chooses their
    number and size, so a flood of calls never crowds out the model and tool calls the platform
    observes. `with_body=False` is a call whose body is an agent's report, recorded as an event
    of its own: the call's record is counted with the reports. Never raises."""
    try:
        payload = {
            "method": request.method,
            "path": _TOKEN.sub(REDACTED, request.path),
            "query": redacted_summary({k: request.GET.getlist(k) for k in request.GET}),
            "status": status,
            "duration_ms": duration_ms,
            "body": _body_summary(request) if with_body else "[recorded as its own event]",
        }
    except Exception:
        logger.exception("trajectory: could not read the API call of %s", agent.name)
        return None
    return _observed(
        agent=agent,
        kind=TrajectoryEvent.Kind.API_CALL,  # type: ignore[arg-type]  # TextChoices member: a str at run time
        payload=payload,
        budget="api" if with_body else "reported",
    )


# --- tool calls (reported by the agent's harness) -----------------------------------------------


class ToolCallRefused(ValueError):
    """A reported tool call that is not well formed."""

    code = "bad_request"


def tool_call_record(*, agent: Agent, report: Any) -> TrajectoryEvent:
    """Append a tool call the agent's harness reports: `command` (text, required), `output`
    (text), `exit_code` (integer or null), `duration_s` (number or null), `tool` (its name).
    Raises ToolCallRefused for a malformed report, TrajectoryDayFull past the day's bounds."""
    if not isinstance(report, dict):
        raise ToolCallRefused("the body must be a JSON object")
    command, output = report.get("command"), report.get("output", "")
    exit_code, duration = report.get("exit_code"), report.get("duration_s")
    tool = report.get("tool", "shell")
    if not isinstance(command, str) or not command:
        raise ToolCallRefused("'command' (the command or tool input, as text) is required")
    if not isinstance(output, str) or not isinstance(tool, str):
        raise ToolCallRefused("'output' and 'tool' must be text")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ToolCallRefused("'exit_code' must be an integer or null")
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0
    ):
        raise ToolCallRefused("'duration_s' must be a number of seconds or null")
    payload = {
        "tool": tool[:100],
        "command": _TOKEN.sub(REDACTED, command),
        "output": _TOKEN.sub(REDACTED, output),
        "exit_code": exit_code,
        "duration_s": duration,
    }
    return _append(
        agent=agent,
        kind=TrajectoryEvent.Kind.TOOL_CALL,  # type: ignore[arg-type]  # TextChoices member: a str at run time
        reported=True,
        payload=payload,
        budget="reported",
    )


def tool_call_observed(
    *,
    agent: Agent,
    tool: str,
    command: str,
    output: str,
    exit_code: int | None,
    duration_s: float | None,
) -> TrajectoryEvent | None:
    """Record a tool call the platform's harness ran itself, as the agent's user: observed,
    not reported. Same payload and bounds as `tool_call_record`; never raises."""
    payload = {
        "tool": tool[:100],
        "command": _TOKEN.sub(REDACTED, command),
        "output": _TOKEN.sub(REDACTED, output),
        "exit_code": exit_code,
        "duration_s": duration_s,
    }
    return _observed(
        agent=agent, kind=str(TrajectoryEvent.Kind.TOOL_CALL), payload=payload, budget="tool"
    )


# --- reading (organizers and the audit only; no agent route reads it) ---------------------------


def trajectory_lines(agent: Agent) -> Iterator[tuple[int, str]]:
    """The agent's events in order, one line of text each: (event id, line)."""
    events = TrajectoryEvent.objects.filter(agent=agent).order_by("id")
    for event in events.iterator(chunk_size=500):
        source = "reported by the agent" if event.reported else "seen by the platform"
        when = event.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = json.dumps(event.payload, ensure_ascii=False)
        yield event.pk, f"[{when}] {event.kind} ({source}) {text}"


def trajectory_dropped(agent: Agent) -> int:
    """How many events were dropped past the agent's day bounds, all days together."""
    return sum(TrajectoryDay.objects.filter(agent=agent).values_list("dropped", flat=True))
