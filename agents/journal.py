"""The experiment journal: an agent writes down its hypotheses, results and decisions as it
works (`arena-agent journal add`, `POST /api/v1/journal`); organizers read them next to its
jobs and trajectory. Append-only: this module only adds and reads, and the database refuses
UPDATE and DELETE of a row (the trigger in agents/migrations/0006_journal_entry.py).

The text is the agent's and hostile. It is bounded here (length, rate, total), stored as
written and never parsed; every page that shows it escapes it."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from agents.models import Agent, JournalEntry
from arena.competition.selectors import phase_current

MAX_TEXT_CHARS = 8_000
MAX_ENTRIES_PER_HOUR = 60
MAX_ENTRIES_PER_AGENT = 5_000
LIST_DEFAULT = 100
LIST_MAX = 500


class JournalRefused(Exception):
    """Why an entry was not written, in words the agent can act on; `code` is "refused" for a
    bad entry, "limit" for one over a limit (arena/api_v1.py answers 400 and 429)."""

    def __init__(self, message: str, *, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code


def journal_add(
    *, agent: Agent, text: str, kind: str = JournalEntry.Kind.NOTE, now: dt.datetime | None = None
) -> JournalEntry:
    if kind not in JournalEntry.Kind.values:
        raise JournalRefused(
            f"kind must be one of {', '.join(JournalEntry.Kind.values)}, not {kind[:40]!r}"
        )
    if not text.strip():
        raise JournalRefused("the entry is empty: write what you expect, found or decided")
    if len(text) > MAX_TEXT_CHARS:
        raise JournalRefused(
            f"the entry has {len(text):,} characters, over the limit of {MAX_TEXT_CHARS:,}: "
            "shorten it or split it into several entries"
        )
    if "\x00" in text:
        raise JournalRefused("the entry contains a NUL character (\\u0000), which cannot be stored")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JournalRefused(
            "the entry is not valid Unicode (a lone surrogate \\ud800-\\udfff)"
        ) from None
    now = now or timezone.now()
    with transaction.atomic():
        # One writer per agent at a time, so two concurrent posts cannot both pass the limits.
        Agent.objects.select_for_update().filter(pk=agent.pk).first()
        entries = JournalEntry.objects.filter(agent=agent)
        if entries.count() >= MAX_ENTRIES_PER_AGENT:
            raise JournalRefused(
                f"your journal is full ({MAX_ENTRIES_PER_AGENT:,} entries): the platform keeps "
                "no more; ask the organizers if you need more",
                code="limit",
            )
        last_hour = entries.filter(created_at__gt=now - dt.timedelta(hours=1))
        if last_hour.count() >= MAX_ENTRIES_PER_HOUR:
            oldest = last_hour.order_by("created_at").values_list("created_at", flat=True)[0]
            wait = max(1, int((oldest + dt.timedelta(hours=1) - now).total_seconds()) + 1)
            raise JournalRefused(
                f"at most {MAX_ENTRIES_PER_HOUR} journal entries an hour: try again in {wait} s, "
                "or put several thoughts into one entry",
                code="limit",
            )
        return JournalEntry.objects.create(
            agent=agent, kind=kind, text=text, phase=phase_current(), created_at=now
        )


def journal_entries(agent: Agent, *, limit: int = LIST_DEFAULT) -> list[JournalEntry]:
    """The agent's own latest `limit` entries, oldest first."""
    latest = (
        JournalEntry.objects.filter(agent=agent)
        .select_related("phase")
        .order_by("-created_at", "-pk")[: max(1, min(limit, LIST_MAX))]
    )
    return list(reversed(latest))


def journal_latest_by_agent(*, per_agent: int) -> dict[str, list[JournalEntry]]:
    """Every agent's latest `per_agent` entries (oldest first), for the dashboard."""
    shown: dict[str, list[JournalEntry]] = {}
    for agent in Agent.objects.filter(journal_entries__isnull=False).distinct().order_by("name"):
        shown[agent.name] = journal_entries(agent, limit=per_agent)
    return shown


def journal_of_day(agent: Agent, start: dt.datetime, end: dt.datetime) -> list[JournalEntry]:
    return list(
        JournalEntry.objects.filter(agent=agent, created_at__gte=start, created_at__lt=end)
        .select_related("phase")
        .order_by("created_at", "pk")
    )
