"""Reads behind the agents' livestream (`live_views.py`, `live_consumers.py`): an agent's budget
bars, its latest journal entries, and whether (and how late) the public may watch it.

The events themselves come from `agents.trajectory_live`. Everything here returns plain
dicts of text and numbers, ready for JSON: the page draws them with `textContent`.

The public view (`Competition.live_public_delay_minutes`) shows events and journal entries
older than now − delay, and no budget: the figures are as of now, which would tell what the
delay hides (a job started minutes ago), and the money an agent spent is the organizers'.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from agents.models import Agent, JournalEntry
from agents.text_cut import cut
from arena.competition.models import CompetitionAgent
from cluster.selectors import gpu_seconds_charged
from frontend.organizer import Usage

JOURNAL_SHOWN = 10
JOURNAL_TEXT_CHARS = 2000


# -- budget bars -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetBar:
    key: str
    label: str
    unit: str
    usage: Usage

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "used": round(self.usage.used, 2),
            "limit": round(self.usage.limit, 2),
            "fraction": round(self.usage.fraction, 4),
            "over": self.usage.over,
        }


def live_budget(agent: Agent) -> list[dict[str, Any]]:
    """GPU-hours (the account's current period), API credit (spent plus in flight), the
    scaffold's own credit, and storage, each used against its limit."""
    account = agent.cluster_account
    credit = float(agent.credit_spent + agent.credit_reserved)
    scaffold = float(agent.scaffold_credit_spent + agent.scaffold_credit_reserved)
    bars = [
        BudgetBar("api_credit", "API credit", "$", Usage(credit, float(agent.credit_limit))),
        BudgetBar(
            "scaffold_credit", "Scaffold credit", "$",
            Usage(scaffold, float(agent.scaffold_credit_limit)),
        ),
    ]  # fmt: skip
    if account is not None:  # an agent not provisioned on the cluster has no GPU or storage
        gpu_hours = gpu_seconds_charged(account, period=account.period) / 3600
        storage_gib = account.storage_bytes_used / 1024**3
        bars.insert(
            0, BudgetBar("gpu_hours", "GPU-hours", "GPU-h",
                         Usage(gpu_hours, float(account.gpu_hours_limit)))
        )  # fmt: skip
        bars.append(
            BudgetBar(
                "storage", "Storage", "GiB", Usage(storage_gib, float(account.storage_gib_limit))
            )
        )
    return [bar.as_dict() for bar in bars]


def live_budget_of(agent_id: int) -> list[dict[str, Any]]:
    """The bars with the agent's ledgers read afresh (the socket's periodic update)."""
    agent = Agent.objects.filter(pk=agent_id).first()
    return live_budget(agent) if agent is not None else []


# -- the journal beside the stream -----------------------------------------------------------


def journal_latest(
    agent: Agent, *, until: dt.datetime | None = None, limit: int = JOURNAL_SHOWN
) -> list[dict[str, Any]]:
    """The agent's latest journal entries (none younger than `until`), newest first."""
    entries = JournalEntry.objects.filter(agent=agent)
    if until is not None:
        entries = entries.filter(created_at__lte=until)
    return [
        {
            "id": entry.pk,
            "at": entry.created_at.astimezone(dt.UTC).isoformat(timespec="seconds"),
            "kind": entry.kind,
            "text": cut(entry.text, JOURNAL_TEXT_CHARS),
        }
        for entry in entries.order_by("-created_at", "-pk")[:limit]
    ]


# -- who may watch ---------------------------------------------------------------------------


def public_delay(agent_name: str) -> dt.timedelta | None:
    """How late the public sees this agent, or None: not public. Public only when every
    competition that fields the agent has switched the view on, and then as late as the
    latest of them asks."""
    delays = list(
        CompetitionAgent.objects.filter(name=agent_name).values_list(
            "competition__live_public_delay_minutes", flat=True
        )
    )
    if not delays or any(minutes is None for minutes in delays):
        return None
    return dt.timedelta(minutes=max(delays))


def agents_watched() -> list[dict[str, Any]]:
    """Every agent, for the organizer's index of live pages."""
    watched = []
    for agent in Agent.objects.order_by("name"):
        delay = public_delay(agent.name)
        public = int(delay.total_seconds() // 60) if delay is not None else None
        watched.append({"name": agent.name, "active": agent.active, "public_delay_minutes": public})
    return watched
