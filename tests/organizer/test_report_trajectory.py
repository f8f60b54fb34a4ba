"""The daily report's trajectory part: what the platform recorded of an agent's day — calls by
kind, its scaffold's own spend, events dropped, and its first and last tool commands, escaped."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.management import call_command

from agents.models import ProxyCall, TrajectoryDay, TrajectoryEvent
from agents.trajectory_selectors import COMMAND_CHARS, DAY_COMMANDS, trajectory_of_day
from arena.phases.reports import agent_day, day_bounds
from tests.organizer import builders

pytestmark = pytest.mark.django_db

DAY = dt.date(2025, 3, 14)
HOSTILE = "echo '<script>alert(1)</script>' | tee x\nrm -rf ~/notes"


def at(hour: int, minute: int = 0, *, day: dt.date = DAY) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)


def event(agent, kind: str, when: dt.datetime, **payload) -> TrajectoryEvent:
    # Written as the recorder writes them, at a chosen time (the store takes inserts only).
    return TrajectoryEvent.objects.create(
        agent=agent, kind=kind, reported=kind == "tool_call", payload=payload, size=100,
        created_at=when,
    )  # fmt: skip


@pytest.fixture
def worked():
    """ann on DAY: 3 model calls, 2 API calls, 12 tool calls (the first hostile), 4 events
    dropped; $0.40 of scaffold calls that day and $9 the day before; $1.25 of her own API
    calls."""
    ann = builders.agent("ann")
    builders.agent("ben")
    for minute in range(3):
        event(ann, "model_call", at(9, minute), model="m", budget="scaffold")
    for minute in range(2):
        event(ann, "api_call", at(10, minute), method="GET", path="/api/v1/budget", status=200)
    event(ann, "tool_call", at(11), command=HOSTILE, exit_code=0, tool="shell")
    for minute in range(1, 11):
        event(ann, "tool_call", at(11, minute), command=f"step {minute}", exit_code=minute % 2)
    event(ann, "tool_call", at(23, 59), command="x" * (COMMAND_CHARS + 50), tool="shell")
    event(ann, "tool_call", at(0, 1, day=DAY + dt.timedelta(days=1)), command="tomorrow")
    TrajectoryDay.objects.create(
        agent=ann, day=DAY, events=17, bytes=1700, dropped=4, model_dropped=1, api_dropped=3
    )
    TrajectoryDay.objects.create(agent=ann, day=DAY - dt.timedelta(days=1), dropped=50)
    for when, cost in (
        (at(9), "0.15"),
        (at(9, 2), "0.25"),
        (at(9, day=DAY - dt.timedelta(days=1)), "9"),
    ):
        call = builders.proxy_call(ann, at=when, cost=cost)
        ProxyCall.objects.filter(pk=call.pk).update(budget=ProxyCall.Budget.SCAFFOLD)
    builders.proxy_call(ann, at=at(10), cost="1.25")
    return ann


def test_the_day_counts_each_kind_the_scaffold_spend_and_the_drops(worked):
    day = trajectory_of_day(worked, *day_bounds(DAY))

    assert (day.model_calls, day.api_calls, day.tool_calls) == (3, 2, 12)
    assert day.dropped == 4  # not the day before's
    assert day.dropped_by_budget == {"model": 1, "tool": 0, "api": 3, "reported": 0}
    assert (day.scaffold_calls, day.scaffold_spend) == (2, Decimal("0.40"))
    assert [c.command for c in day.first_commands] == [
        HOSTILE,
        *(f"step {i}" for i in range(1, DAY_COMMANDS)),
    ]
    assert [c.command[:7] for c in day.last_commands] == [
        "step 7", "step 8", "step 9", "step 10", "xxxxxxx",
    ]  # fmt: skip
    assert day.last_commands[-1].command.endswith("…[50 chars cut]")
    assert day.last_commands[-1].exit_code is None and day.first_commands[1].exit_code == 1


def test_the_api_credit_part_counts_the_agents_own_calls_only(worked):
    report = agent_day(worked, DAY)
    assert report.api_calls == 1 and report.api_spend_day == Decimal("1.25")
    assert report.api_spent_total == Decimal("1.25")  # the scaffold's $9.40 is another ledger


def test_a_short_day_lists_its_commands_once():
    quiet = builders.agent("quiet")
    event(quiet, "tool_call", at(8), command="ls")
    event(quiet, "tool_call", at(9), command="pwd")
    day = trajectory_of_day(quiet, *day_bounds(DAY))
    assert [c.command for c in day.first_commands] == ["ls", "pwd"] and day.last_commands == []
    assert [title for title, _ in day.command_tables] == ["First tool commands"]


def test_the_report_files_show_the_trajectory_escaped(worked, tmp_path):
    call_command("reports", "daily", "--date", DAY.isoformat(), "--out", str(tmp_path))

    markdown = (tmp_path / "ann.md").read_text()
    assert "## Trajectory" in markdown
    assert "- model calls: 3 · tool calls (reported by the agent): 12 · API calls: 2" in markdown
    assert "- scaffold's own model calls: 2, $0.40 this day" in markdown
    assert (
        "- events dropped past the day's bounds: 4 (model calls: 1, API call records: 3)"
        in markdown
    )
    # The agent's text cannot break the table: `|` escaped, the newline folded.
    assert (
        "| 11:00:00 | shell | echo '<script>alert(1)</script>' \\| tee x rm -rf ~/notes | 0 |"
        in markdown
    )
    assert "tomorrow" not in markdown

    html = (tmp_path / "ann.html").read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<h3>Last tool commands</h3>" in html
    assert (
        "- model calls: 0 · tool calls (reported by the agent): 0 · API calls: 0"
        in (tmp_path / "ben.md").read_text()
    )
