"""The organizer's pages, one builder each: what a page shows and nothing of another's.

- phases (`/organizer/`): the timeline, what the phase engine could not do, a summary of the
  other pages with links, the nominations per phase, the leaderboards, leaks, targeted rounds;
- agents (`/organizer/agents/`): every agent's budget and live page, journals and lock-in;
- one agent (`/organizer/agents/<name>/`): its budget, jobs, nominations with their cards,
  journal, lock-in and evaluation results;
- cluster (`/organizer/cluster/`): nodes, the queue, GPUs per account and QOS, the jobs;
- evaluation (`/organizer/evaluation/`) and audit (`/organizer/audit/`): the sections those
  apps' results make.

The views (`organizer_views.py`) only render what these return; every read of another app's
rows goes through that app's selectors.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agents.selectors import agents_in_order
from arena.phases.models import AgentStepFailure, WorkerFailure
from arena.phases.selectors import agent_step_failures_open, worker_failures_recent
from cluster.selectors import job_counts_by_state
from evalsuite.selectors import eval_run_counts
from frontend import organizer
from frontend.organizer import (
    AgentBudgetLine,
    NominationLine,
    OrganizerSection,
    PhaseLeaderboard,
    PhaseLine,
    RecentJob,
    agent_budgets,
    jobs_recent,
    leaderboards_by_phase,
    next_event,
    nominations_all,
    phase_timeline,
    provided_sections,
)
from frontend.organizer_agent_evals import agent_progress_sections, on_demand_run_sections
from frontend.organizer_cluster import ClusterNow, cluster_now
from frontend.organizer_journal import journal_sections, lock_in_sections
from safety.selectors import findings_for_dashboard

# Which page shows which of `organizer.SECTION_PROVIDERS`; the evaluation page shows the rest.
PAGE_SECTIONS: dict[str, list[str]] = {
    "phases": [
        "frontend.organizer_sections:leak_sections",
        "frontend.organizer_rounds:targeted_round_sections",
    ],
    "agents": [
        "frontend.organizer_journal:journal_sections",
        "frontend.organizer_journal:lock_in_sections",
    ],
    "audit": [
        "frontend.organizer_sections:audit_sections",
        "frontend.organizer_voters:voter_sections",
    ],
}


def page_providers(page: str) -> list[str]:
    """The section providers `page` shows, in `SECTION_PROVIDERS`' order."""
    if page == "evaluation":
        claimed = {entry for entries in PAGE_SECTIONS.values() for entry in entries}
        return [entry for entry in organizer.SECTION_PROVIDERS if entry not in claimed]
    return [entry for entry in organizer.SECTION_PROVIDERS if entry in PAGE_SECTIONS[page]]


# -- phases, the overview --------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryLine:
    """One line of the overview about another page: what is there in a few figures."""

    page: str  # the URL name of the page it links to
    title: str
    figures: str


@dataclass(frozen=True)
class PhasesPage:
    now: dt.datetime
    timeline: list[PhaseLine]
    next_up: PhaseLine | None
    agent_failures: list[AgentStepFailure]
    worker_failures: list[WorkerFailure]
    summary: list[SummaryLine]
    nominations: list[NominationLine]
    leaderboards: list[PhaseLeaderboard]
    sections: list[OrganizerSection]


def phases_page(*, now: dt.datetime | None = None) -> PhasesPage:
    now = now or timezone.now()
    timeline = phase_timeline(now=now)
    return PhasesPage(
        now=now,
        timeline=timeline,
        next_up=next_event(timeline, now=now),
        agent_failures=agent_step_failures_open(),
        worker_failures=worker_failures_recent(since=now - dt.timedelta(days=1)),
        summary=_summary(),
        nominations=nominations_all(),
        leaderboards=leaderboards_by_phase(),
        sections=provided_sections(page_providers("phases")),
    )


def _summary() -> list[SummaryLine]:
    agents = agents_in_order()
    blocked = [
        agent.name
        for agent in agents
        if agent.cluster_account is not None and agent.cluster_account.blocked_reason
    ]
    jobs = job_counts_by_state()
    runs = eval_run_counts()
    findings = findings_for_dashboard()["counts"]
    return [
        SummaryLine(
            "organizer-agents",
            "Agents",
            f"{sum(a.active for a in agents)} active of {len(agents)}"
            + (f"; submissions blocked for {', '.join(blocked)}" if blocked else ""),
        ),
        SummaryLine(
            "organizer-cluster",
            "Cluster",
            f"{jobs.get('RUNNING', 0)} jobs running, {jobs.get('PENDING', 0)} pending"
            " (as of the last sync)",
        ),
        SummaryLine(
            "organizer-evaluation",
            "Evaluation and audit",
            "evaluation runs: "
            + (", ".join(f"{n} {s}" for s, n in sorted(runs.items())) or "none"),
        ),
        SummaryLine(
            "organizer-audit",
            "Audit findings",
            ", ".join(f"{n} {status}" for status, n in findings.items()),
        ),
    ]


# -- agents ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentsPage:
    budgets: list[AgentBudgetLine]
    watched: list[dict[str, Any]]  # name, active, public_delay_minutes (None: not public)
    sections: list[OrganizerSection]


def _gpus_now() -> dict[tuple[str, str], int] | None:
    """GPUs of running jobs per (account, QOS) as the scheduler says now; None (the platform's
    rows as of the last sync) when it does not answer."""
    cluster = cluster_now()
    return None if cluster.error else dict(cluster.gpus_in_use)


def agents_page(*, watched: list[dict[str, Any]]) -> AgentsPage:
    """`watched`: `frontend.live.agents_watched()`, who may watch each agent and how late."""
    return AgentsPage(
        budgets=agent_budgets(gpus_in_use=_gpus_now()),
        watched=watched,
        sections=provided_sections(page_providers("agents")),
    )


@dataclass(frozen=True)
class AgentPage:
    agent: str
    budget: AgentBudgetLine
    jobs: list[RecentJob]
    nominations: list[NominationLine]
    sections: list[OrganizerSection]  # journal, lock-in, evaluation results: its own rows

    @property
    def budgets(self) -> list[AgentBudgetLine]:
        return [self.budget]


def agent_page(*, name: str) -> AgentPage | None:
    """One agent's page, or None when there is no such agent."""
    if not agents_in_order(names=[name]):
        return None
    (budget,) = agent_budgets(agents=[name], gpus_in_use=_gpus_now())
    sections: list[OrganizerSection] = []
    for provider in (
        journal_sections,
        lock_in_sections,
        agent_progress_sections,
        on_demand_run_sections,
    ):
        sections.extend(provider(agent=name))
    return AgentPage(
        agent=name,
        budget=budget,
        jobs=jobs_recent(agent=name),
        nominations=nominations_all(agent=name),
        sections=sections,
    )


# -- cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterPage:
    cluster: ClusterNow
    budgets: list[AgentBudgetLine]  # for GPUs in use per QOS against each account's maximum
    jobs: list[RecentJob]
    jobs_agent: str  # the agent the job list is filtered to, "" for all
    agents: list[str]


def cluster_page(*, jobs_agent: str = "") -> ClusterPage:
    cluster = cluster_now()
    return ClusterPage(
        cluster=cluster,
        budgets=agent_budgets(gpus_in_use=None if cluster.error else cluster.gpus_in_use),
        jobs=jobs_recent(agent=jobs_agent or None),
        jobs_agent=jobs_agent,
        agents=[agent.name for agent in agents_in_order()],
    )


# -- evaluation and audit --------------------------------------------------------------------


def evaluation_page() -> list[OrganizerSection]:
    return provided_sections(page_providers("evaluation"))


def audit_page() -> list[OrganizerSection]:
    return provided_sections(page_providers("audit"))
