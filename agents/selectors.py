from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from agents.credit import credit_left
from agents.models import (
    Agent,
    AgentToken,
    Checkpoint,
    DataRecord,
    Nomination,
    NomineeCopy,
    ProxyCall,
    Upstream,
)
from agents.services import token_digest
from cluster.models import ClusterAccount, Job
from cluster.selectors import gpu_seconds_charged


def agent_for_token(token: str, *, kind: str) -> Agent | None:
    found = (
        AgentToken.objects.filter(
            digest=token_digest(token), kind=kind, revoked_at=None, agent__active=True
        )
        .select_related("agent__cluster_account")
        .first()
    )
    return found.agent if found else None


# Which ledger a proxy token's calls are billed to: the agent's own proxy token and the judge
# tokens of its evaluations spend its API credit; its scaffold's token spends the scaffold
# credit the organizers set (issue 15, item 2). No token spends both.
PROXY_TOKEN_BUDGETS = {
    AgentToken.Kind.PROXY: ProxyCall.Budget.API,
    AgentToken.Kind.JUDGE: ProxyCall.Budget.API,
    AgentToken.Kind.SCAFFOLD: ProxyCall.Budget.SCAFFOLD,
}


def proxy_caller(token: str) -> tuple[Agent, str] | None:
    """Whom a proxy call bills, and on which ledger (`ProxyCall.Budget`)."""
    found = (
        AgentToken.objects.filter(
            digest=token_digest(token),
            kind__in=list(PROXY_TOKEN_BUDGETS),
            revoked_at=None,
            agent__active=True,
        )
        .select_related("agent")
        .first()
    )
    if found is None:
        return None
    return found.agent, PROXY_TOKEN_BUDGETS[AgentToken.Kind(found.kind)]  # type: ignore[return-value]  # TextChoices member: a str at run time


def agent_for_proxy_token(token: str) -> Agent | None:
    """Whom a proxy call bills: the agent's own proxy token, the judge token of one of its
    on-demand evaluations (`agents.services.judge_token_issue`), or its scaffold's token."""
    caller = proxy_caller(token)
    return caller[0] if caller else None


def upstreams_active() -> list[Upstream]:
    return list(Upstream.objects.filter(active=True).order_by("name"))


def agent_job(agent: Agent, scheduler_id: str) -> Job | None:
    # No account (a judge agent) matches no job: Job.account is never empty.
    return Job.objects.filter(
        account_id=agent.cluster_account_id, scheduler_id=scheduler_id
    ).first()


def agent_budget(agent: Agent) -> dict[str, Any]:
    """What the agent has used and has left, from the platform's ledgers."""
    agent.refresh_from_db()  # fresh ledgers, and the account read again with them
    account = agent.cluster_account
    if account is None:
        raise ClusterAccount.DoesNotExist(f"agent {agent.name} has no cluster account")
    used_hours = gpu_seconds_charged(account, period=account.period) / 3600
    running = Job.objects.filter(account=account, state=Job.State.RUNNING)
    return {
        "agent": agent.name,
        "period": account.period,
        "gpu_hours": {
            "used": round(used_hours, 4),
            "limit": float(account.gpu_hours_limit),
            "left": round(max(0.0, float(account.gpu_hours_limit) - used_hours), 4),
        },
        "gpus_running": {
            "normal": sum(j.gpus for j in running if j.qos == "normal"),
            "normal_limit": account.max_gpus,
            "preemptible": sum(j.gpus for j in running if j.qos == "preemptible"),
            "preemptible_limit": account.max_preemptible_gpus,
        },
        "max_job_hours": account.max_job_hours,
        "storage": {
            "used_gib": round(account.storage_bytes_used / 1024**3, 3),
            "limit_gib": account.storage_gib_limit,
            "measured_at": account.storage_measured_at.isoformat()
            if account.storage_measured_at
            else None,
        },
        "api_credit_usd": {
            "spent": float(agent.credit_spent),
            "in_flight": float(agent.credit_reserved),
            "limit": float(agent.credit_limit),
            "left": float(credit_left(agent, ProxyCall.Budget.API)),  # type: ignore[arg-type]  # TextChoices member: a str at run time
        },
        # What the agent's harness's own model calls may still cost (issue 15, item 2): set by
        # the organizers, apart from the API credit, and never a fallback for it.
        "scaffold_credit_usd": {
            "spent": float(agent.scaffold_credit_spent),
            "in_flight": float(agent.scaffold_credit_reserved),
            "limit": float(agent.scaffold_credit_limit),
            "left": float(credit_left(agent, ProxyCall.Budget.SCAFFOLD)),  # type: ignore[arg-type]  # TextChoices member: a str at run time
        },
        "submissions_blocked": account.blocked_reason,
    }


# -- reads for the organizer's pages ---------------------------------------------------------


def agents_in_order(*, names: Collection[str] | None = None) -> list[Agent]:
    """Agents by name, each with its cluster account loaded (`agent.cluster_account`, None for
    the judge agents): no page looks an account up again by its name."""
    agents = Agent.objects.select_related("cluster_account").order_by("name")
    if names is not None:
        agents = agents.filter(name__in=list(names))
    return list(agents)


def agent_names_by_account() -> dict[str, str]:
    """Each cluster account's agent: the name to show for the account's jobs."""
    return dict(
        Agent.objects.filter(cluster_account__isnull=False).values_list(
            "cluster_account__name", "name"
        )
    )


def nominations_with_copies(*, agent: str | None = None) -> list[Nomination]:
    """Nominations by phase and agent, with their checkpoint's job and the arena's copy (if
    the phase froze) loaded: `nomination_served_copy` reads it without a query."""
    nominations = Nomination.objects.select_related(
        "agent", "phase", "checkpoint__job", "nominee_copy"
    ).order_by("phase__starts_at", "agent__name")
    if agent is not None:
        nominations = nominations.filter(agent__name=agent)
    return list(nominations)


def nomination_served_copy(nomination: Nomination) -> NomineeCopy | None:
    try:
        return nomination.nominee_copy
    except NomineeCopy.DoesNotExist:
        return None


# -- for the organizers' daily reports (arena.phases.reports) ---------------------------------


@dataclass(frozen=True)
class ApiUsage:
    calls: int
    tokens: int  # prompt and completion
    cost_usd: Decimal


def api_usage_between(agent: Agent, *, start: dt.datetime, end: dt.datetime) -> ApiUsage:
    """The agent's own API-credit calls in [start, end); its scaffold's are billed apart."""
    totals = ProxyCall.objects.filter(
        agent=agent, budget=ProxyCall.Budget.API, created_at__gte=start, created_at__lt=end
    ).aggregate(
        n=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cost=Sum("cost_usd"),
    )
    return ApiUsage(
        calls=totals["n"] or 0,
        tokens=(totals["prompt"] or 0) + (totals["completion"] or 0),
        cost_usd=totals["cost"] or Decimal(0),
    )


def api_spent_before(agent: Agent, *, end: dt.datetime) -> Decimal:
    """The agent's own API credit spent before `end`."""
    spent = ProxyCall.objects.filter(
        agent=agent, budget=ProxyCall.Budget.API, created_at__lt=end
    ).aggregate(cost=Sum("cost_usd"))["cost"]
    return spent or Decimal(0)


def data_records_between(agent: Agent, *, start: dt.datetime, end: dt.datetime) -> list[DataRecord]:
    return list(DataRecord.objects.filter(agent=agent, created_at__gte=start, created_at__lt=end))


def checkpoints_between(agent: Agent, *, start: dt.datetime, end: dt.datetime) -> list[Checkpoint]:
    return list(
        Checkpoint.objects.filter(
            agent=agent, created_at__gte=start, created_at__lt=end
        ).select_related("job", "parent")
    )


def nominations_touched_between(
    agent: Agent, *, start: dt.datetime, end: dt.datetime
) -> list[Nomination]:
    """The agent's nominations made or changed in [start, end)."""
    return list(
        Nomination.objects.filter(agent=agent)
        .filter(
            Q(created_at__gte=start, created_at__lt=end)
            | Q(updated_at__gte=start, updated_at__lt=end)
        )
        .select_related("phase", "checkpoint")
    )
