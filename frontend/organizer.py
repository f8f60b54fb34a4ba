"""The parts the organizer's pages are built from: the phase timeline, budget use per agent,
jobs, nominations with their model cards, the leaderboards per phase, and the titled sections
other modules provide (`SECTION_PROVIDERS`). `organizer_pages.py` puts them on pages.

Everything here is read-only and reads other apps' rows through their selectors.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from agents.selectors import (
    agent_names_by_account,
    agents_in_order,
    nomination_served_copy,
    nominations_with_copies,
)
from agents.text_cut import cut
from arena.competition.models import Phase
from arena.competition.selectors import phases_in_order
from arena.leaderboard.selectors import snapshot_latest
from cluster.backends.base import NORMAL_QOS, PREEMPTIBLE_QOS
from cluster.selectors import (
    gpu_seconds_charged,
    job_counts_by_state,
    jobs_latest,
    running_gpus_by_account_qos,
)

log = logging.getLogger(__name__)

RECENT_JOBS = 50


# -- time in words ---------------------------------------------------------------------------


def duration_words(delta: dt.timedelta) -> str:
    """A span the way people say it, to the two largest units: "2 h 10 min", "3 d 4 h"."""
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    units = [("d", 86400), ("h", 3600), ("min", 60)]
    parts: list[str] = []
    for name, size in units:
        amount, seconds = divmod(seconds, size)
        if amount or parts:
            parts.append(f"{amount} {name}")
        if len(parts) == 2:
            break
    return " ".join(p for p in parts if not p.startswith("0 ")) or "0 min"


# -- the phase timeline ----------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseLine:
    competition: str
    label: str
    number: int
    state: str
    starts_at: dt.datetime
    ends_at: dt.datetime
    next_event: str  # what happens next to this phase, in words
    next_at: dt.datetime | None  # when, if it is scheduled by the calendar
    current: bool


def phase_timeline(*, now: dt.datetime) -> list[PhaseLine]:
    lines = []
    for phase in phases_in_order():
        event, at = _next_event(phase, now)
        lines.append(
            PhaseLine(
                competition=phase.competition.name,
                label=phase.label,
                number=phase.number,
                state=phase.state,
                starts_at=phase.starts_at,
                ends_at=phase.ends_at,
                next_event=event,
                next_at=at,
                current=phase.state in {Phase.State.RUNNING, Phase.State.SERVING},
            )
        )
    return lines


def _next_event(phase: Phase, now: dt.datetime) -> tuple[str, dt.datetime | None]:
    label = phase.label
    if phase.state == Phase.State.SCHEDULED:
        if phase.starts_at > now:
            return f"{label} starts in {duration_words(phase.starts_at - now)}", phase.starts_at
        return (
            f"{label} was due to start {duration_words(now - phase.starts_at)} ago: "
            "the next `phases tick` starts it",
            phase.starts_at,
        )
    if phase.state == Phase.State.RUNNING:
        if phase.ends_at > now:
            return f"{label} freezes in {duration_words(phase.ends_at - now)}", phase.ends_at
        return (
            f"{label} was due to freeze {duration_words(now - phase.ends_at)} ago: "
            "the next `phases tick` freezes it",
            phase.ends_at,
        )
    if phase.state == Phase.State.FROZEN:
        return f"{label} is frozen: its nominated models go to the arena next", None
    if phase.state == Phase.State.SERVING:
        return f"{label}'s nominated models are in the arena", None
    return f"{label} is closed", None


def next_event(lines: list[PhaseLine], *, now: dt.datetime) -> PhaseLine | None:
    """The phase whose next calendar event comes soonest (overdue ones first)."""
    dated = [line for line in lines if line.next_at is not None]
    return min(dated, key=lambda line: line.next_at) if dated else None  # type: ignore[arg-type,return-value]


# -- budgets ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    used: float
    limit: float

    @property
    def fraction(self) -> float:
        if self.limit <= 0:
            return 1.0 if self.used > 0 else 0.0
        return min(1.0, self.used / self.limit)

    @property
    def percent(self) -> int:
        return round(100 * self.fraction)

    @property
    def over(self) -> bool:
        return self.used > self.limit


@dataclass(frozen=True)
class AgentBudgetLine:
    agent: str
    active: bool
    period: str
    gpu_hours: Usage  # in the account's current budget period
    api_credit_usd: Usage  # settled spend plus calls in flight
    scaffold_credit_usd: Usage  # the harness's own model calls, the same way (issue 15)
    storage_gib: Usage
    normal_gpus: Usage  # GPUs in use now / at most at once, on the normal QOS
    preemptible_gpus: Usage  # the same on the preemptible QOS
    jobs_by_state: dict[str, int]
    blocked_reason: str


def agent_budgets(
    *,
    gpus_in_use: Mapping[tuple[str, str], int] | None = None,
    agents: Collection[str] | None = None,
) -> list[AgentBudgetLine]:
    """`gpus_in_use`: the scheduler's GPUs of running jobs per (account, QOS); without it, the
    platform's job rows as of the last sync. `agents`: only these (all when None)."""
    if gpus_in_use is None:
        gpus_in_use = running_gpus_by_account_qos()
    chosen = agents_in_order(names=agents)
    lines = []
    for agent in chosen:
        account = agent.cluster_account
        credit = Usage(
            used=float(agent.credit_spent + agent.credit_reserved), limit=float(agent.credit_limit)
        )
        scaffold = Usage(
            used=float(agent.scaffold_credit_spent + agent.scaffold_credit_reserved),
            limit=float(agent.scaffold_credit_limit),
        )
        if account is None:
            lines.append(
                AgentBudgetLine(
                    agent=agent.name,
                    active=agent.active,
                    period="",
                    gpu_hours=Usage(0, 0),
                    api_credit_usd=credit,
                    scaffold_credit_usd=scaffold,
                    storage_gib=Usage(0, 0),
                    normal_gpus=Usage(0, 0),
                    preemptible_gpus=Usage(0, 0),
                    jobs_by_state={},
                    blocked_reason="no cluster account",
                )  # fmt: skip
            )
            continue
        states = job_counts_by_state(account=account.name)
        lines.append(
            AgentBudgetLine(
                agent=agent.name,
                active=agent.active,
                period=account.period,
                gpu_hours=Usage(
                    used=gpu_seconds_charged(account, period=account.period) / 3600,
                    limit=float(account.gpu_hours_limit),
                ),
                api_credit_usd=credit,
                scaffold_credit_usd=scaffold,
                storage_gib=Usage(
                    used=account.storage_bytes_used / 1024**3,
                    limit=float(account.storage_gib_limit),
                ),
                normal_gpus=Usage(
                    used=gpus_in_use.get((account.name, NORMAL_QOS), 0), limit=account.max_gpus
                ),
                preemptible_gpus=Usage(
                    used=gpus_in_use.get((account.name, PREEMPTIBLE_QOS), 0),
                    limit=account.max_preemptible_gpus,
                ),
                jobs_by_state=states,
                blocked_reason=account.blocked_reason,
            )
        )
    return lines


# -- jobs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecentJob:
    agent: str
    scheduler_id: str
    backend: str
    name: str
    state: str
    reason: str
    qos: str
    gpus: int
    gpu_hours_charged: float
    submitted_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None


def jobs_recent(*, agent: str | None = None, limit: int = RECENT_JOBS) -> list[RecentJob]:
    owners = agent_names_by_account()
    accounts = None if not agent else [a for a, name in owners.items() if name == agent]
    return [
        RecentJob(
            agent=owners.get(job.account.name, job.account.name),
            scheduler_id=job.scheduler_id,
            backend=job.backend,
            name=job.name,
            state=job.state,
            reason=job.reason,
            qos=job.qos,
            gpus=job.gpus,
            gpu_hours_charged=job.gpu_seconds_charged / 3600,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            ended_at=job.ended_at,
        )
        for job in jobs_latest(accounts=accounts, limit=limit)
    ]


# -- nominations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NominationLine:
    agent: str
    phase: str
    checkpoint: str
    job: str
    card_fields: dict[str, str]  # the card's front matter, as text
    card_text: str  # the card's body as the agent wrote it, bounded: shown as text, never markup
    updated_at: dt.datetime
    served_copy: str = ""  # the platform's copy the arena serves, once the phase froze
    not_servable: str = ""  # why the arena does not serve it


# The agent's card is its own text: like the daily report's agent text (arena.phases.reports),
# it is shown as written and autoescaped, so no link, image or heading of the agent's becomes
# one of the organizer's page.
CARD_TEXT_CHARS = 64 * 1024
CARD_FIELD_CHARS = 1_000
CARD_FIELDS = 100  # fields, and items of a list field


def card_body(card: str) -> str:
    """The model card without its YAML front matter (shown separately, as fields)."""
    if card.startswith("---\n") and "\n---" in card[4:]:
        return card[4:].split("\n---", 1)[1].lstrip("-").lstrip("\n")
    return card


def _field_texts(fields: object) -> dict[str, str]:
    """The card's fields as short text (registration bounds them; a row stored before it did
    is cut here too)."""
    if not isinstance(fields, dict):
        return {}
    texts = {}
    for name, value in list(fields.items())[:CARD_FIELDS]:
        items = value[:CARD_FIELDS] if isinstance(value, list) else [value]
        text = ", ".join(str(item)[:CARD_FIELD_CHARS] for item in items)
        texts[str(name)[:100]] = cut(text, CARD_FIELD_CHARS)
    return texts


def nominations_all(*, agent: str | None = None) -> list[NominationLine]:
    """Every nomination (or one agent's), by phase, with its card's fields and text, bounded."""
    lines = []
    for n in nominations_with_copies(agent=agent):
        copy = nomination_served_copy(n)
        lines.append(
            NominationLine(
                agent=n.agent.name,
                phase=n.phase.label,
                checkpoint=n.checkpoint.path,
                job=n.checkpoint.job.scheduler_id,
                card_fields=_field_texts(n.card_fields),
                card_text=cut(card_body(n.model_card), CARD_TEXT_CHARS),
                updated_at=n.updated_at,
                served_copy=copy.folder if copy else "",
                not_servable=copy.not_servable_reason if copy else "",
            )
        )
    return lines


# -- leaderboards per phase ------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseLeaderboard:
    phase: str
    n_battles: int
    computed_at: dt.datetime | None
    style: dict[str, Any] | None  # {"scores": [{"model", "score", "ci_low", ...}], ...}
    raw: dict[str, Any] | None


def leaderboards_by_phase() -> list[PhaseLeaderboard]:
    boards = []
    for label in [phase.label for phase in phases_in_order()]:
        snapshot = snapshot_latest(phase=label)
        boards.append(
            PhaseLeaderboard(
                phase=label,
                n_battles=snapshot.n_battles if snapshot else 0,
                computed_at=snapshot.created_at if snapshot else None,
                style=snapshot.style if snapshot else None,
                raw=snapshot.raw if snapshot else None,
            )
        )
    return boards


# -- sections other apps provide -------------------------------------------------------------


@dataclass(frozen=True)
class OrganizerSection:
    """A titled table for the dashboard. Cells are plain text (escaped when shown)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    # A chart drawn by `frontend.plots` (which escapes every text it writes); shown as is.
    svg: str = ""


# Sections other modules render from their apps' results. Each entry is "module:function"; the
# function takes no arguments and returns a list of OrganizerSection. They are imported when a
# page is shown, so the dependency points from the organizer's pages to those apps, never
# back; an entry whose module does not exist yet is skipped. `organizer_pages.PAGE_SECTIONS`
# says which page shows which; the evaluation page shows every entry no other page claims.
SECTION_PROVIDERS: list[str] = [
    "frontend.organizer_sections:evaluation_sections",
    "frontend.organizer_sections:audit_sections",
    "frontend.organizer_sections:leak_sections",
    "frontend.organizer_agent_evals:agent_progress_sections",
    "frontend.organizer_agent_evals:on_demand_run_sections",
    "frontend.organizer_voters:voter_sections",
    "frontend.organizer_rounds:targeted_round_sections",
    "frontend.organizer_journal:journal_sections",
    "frontend.organizer_journal:lock_in_sections",
]


def provided_sections(providers: list[str] | None = None) -> list[OrganizerSection]:
    sections: list[OrganizerSection] = []
    for entry in SECTION_PROVIDERS if providers is None else providers:
        module_name, _, function_name = entry.partition(":")
        try:
            module = import_module(module_name)
        except ModuleNotFoundError as missing:
            if missing.name and module_name.startswith(missing.name):
                continue  # that app has no dashboard section (yet)
            raise
        provider: Callable[[], list[OrganizerSection]] = getattr(module, function_name)
        try:
            sections.extend(provider())
        except Exception as error:  # one broken provider must not take the dashboard down
            log.exception("organizer section provider %s failed", entry)
            sections.append(
                OrganizerSection(
                    title=entry, columns=[], rows=[], note=f"could not be shown: {error}"
                )
            )
    return sections
