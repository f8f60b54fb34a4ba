"""Reads of the trajectory the platform recorded (`agents.trajectory`), for organizers' tools:
the model-card check (`safety`) and the daily report (`arena.phases.reports`). No route an
agent's token opens calls these."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Sum

from agents.models import Agent, ProxyCall, TrajectoryDay, TrajectoryEvent
from agents.trajectory import BUDGETS

DAY_COMMANDS = 5  # the day's first and last tool commands a report shows
COMMAND_CHARS = 300  # of each: the trajectory keeps up to 4,000, a report line needs less


def trajectory_events(
    agent: Agent,
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    kinds: Iterable[str] | None = None,
) -> Iterator[TrajectoryEvent]:
    """The agent's events recorded in [since, until), in order, streamed from the database
    (a phase's trajectory is never held whole); only `kinds` when given."""
    events = TrajectoryEvent.objects.filter(agent=agent)
    if since is not None:
        events = events.filter(created_at__gte=since)
    if until is not None:
        events = events.filter(created_at__lt=until)
    if kinds is not None:
        events = events.filter(kind__in=list(kinds))
    return events.order_by("id").iterator(chunk_size=500)


@dataclass(frozen=True)
class ToolCommand:
    at: dt.datetime
    tool: str
    command: str  # the agent's text, cut to COMMAND_CHARS: escaped wherever it is shown
    exit_code: int | None


@dataclass(frozen=True)
class TrajectoryOfDay:
    model_calls: int
    tool_calls: int
    api_calls: int
    dropped: int  # events not kept past the day's bounds (TrajectoryDay, by UTC day)
    dropped_by_budget: dict[str, int]  # the same by budget (agents.trajectory.BUDGETS)
    scaffold_calls: int
    scaffold_spend: Decimal  # the scaffold ledger's settled cost of the day's calls
    first_commands: list[ToolCommand]
    last_commands: list[ToolCommand]  # empty when the first ones are all there were

    @property
    def command_tables(self) -> list[tuple[str, list[ToolCommand]]]:
        """The first commands, and the last ones when there were more than the first."""
        tables = [("First tool commands", self.first_commands)]
        if self.last_commands:
            tables.append(("Last tool commands", self.last_commands))
        return tables


def trajectory_of_day(
    agent: Agent, start: dt.datetime, end: dt.datetime, *, commands: int = DAY_COMMANDS
) -> TrajectoryOfDay:
    """What the agent's trajectory holds for [start, end): events by kind, the events dropped
    on the UTC days the span touches, the scaffold's calls and spend, and its first and last
    `commands` tool commands."""
    events = TrajectoryEvent.objects.filter(agent=agent, created_at__gte=start, created_at__lt=end)
    by_kind = dict(events.values_list("kind").annotate(n=Count("id")).values_list("kind", "n"))
    utc_days = (
        start.astimezone(dt.UTC).date(),
        (end - dt.timedelta(microseconds=1)).astimezone(dt.UTC).date(),
    )
    dropped = TrajectoryDay.objects.filter(
        agent=agent, day__gte=utc_days[0], day__lte=utc_days[1]
    ).aggregate(n=Sum("dropped"), **{b: Sum(f"{b}_dropped") for b in BUDGETS})
    scaffold = ProxyCall.objects.filter(
        agent=agent, budget=ProxyCall.Budget.SCAFFOLD, created_at__gte=start, created_at__lt=end
    ).aggregate(n=Count("id"), cost=Sum("cost_usd"))
    tools = events.filter(kind=TrajectoryEvent.Kind.TOOL_CALL)
    first = list(tools.order_by("id")[:commands])
    last = list(tools.order_by("-id")[:commands])[::-1]
    last = [event for event in last if event.pk > first[-1].pk] if first else []
    return TrajectoryOfDay(
        model_calls=by_kind.get(TrajectoryEvent.Kind.MODEL_CALL, 0),
        tool_calls=by_kind.get(TrajectoryEvent.Kind.TOOL_CALL, 0),
        api_calls=by_kind.get(TrajectoryEvent.Kind.API_CALL, 0),
        dropped=dropped["n"] or 0,
        dropped_by_budget={budget: dropped[budget] or 0 for budget in BUDGETS},
        scaffold_calls=scaffold["n"] or 0,
        scaffold_spend=scaffold["cost"] or Decimal(0),
        first_commands=[_command(event) for event in first],
        last_commands=[_command(event) for event in last],
    )


def _command(event: TrajectoryEvent) -> ToolCommand:
    payload = event.payload if isinstance(event.payload, dict) else {}
    command, tool, exit_code = payload.get("command"), payload.get("tool"), payload.get("exit_code")
    command = command if isinstance(command, str) else ""
    if len(command) > COMMAND_CHARS:
        command = command[:COMMAND_CHARS] + f"…[{len(command) - COMMAND_CHARS} chars cut]"
    return ToolCommand(
        at=event.created_at,
        tool=tool[:100] if isinstance(tool, str) else "",
        command=command,
        exit_code=exit_code
        if isinstance(exit_code, int) and not isinstance(exit_code, bool)
        else None,
    )
