from __future__ import annotations

from decimal import Decimal
from typing import Any

from agents.models import Agent, AgentToken, Upstream
from agents.services import token_digest
from cluster.models import ClusterAccount, Job
from cluster.selectors import gpu_seconds_charged


def agent_for_token(token: str, *, kind: str) -> Agent | None:
    found = (
        AgentToken.objects.filter(
            digest=token_digest(token), kind=kind, revoked_at=None, agent__active=True
        )
        .select_related("agent")
        .first()
    )
    return found.agent if found else None


def agent_for_proxy_token(token: str) -> Agent | None:
    """Whom a proxy call bills: the agent's own proxy token, or the judge token of one of its
    on-demand evaluations (`agents.services.judge_token_issue`)."""
    return agent_for_token(token, kind=AgentToken.Kind.PROXY) or agent_for_token(
        token, kind=AgentToken.Kind.JUDGE
    )


def upstreams_active() -> list[Upstream]:
    return list(Upstream.objects.filter(active=True).order_by("name"))


def agent_job(agent: Agent, scheduler_id: str) -> Job | None:
    return Job.objects.filter(
        account__name=agent.cluster_account, scheduler_id=scheduler_id
    ).first()


def agent_budget(agent: Agent) -> dict[str, Any]:
    """What the agent has used and has left, from the platform's ledgers."""
    agent.refresh_from_db()
    account = ClusterAccount.objects.get(name=agent.cluster_account)
    used_hours = gpu_seconds_charged(account, period=account.period) / 3600
    running = Job.objects.filter(account=account, state=Job.State.RUNNING)
    credit_left = agent.credit_limit - agent.credit_spent - agent.credit_reserved
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
            "left": float(max(Decimal(0), credit_left)),
        },
        "submissions_blocked": account.blocked_reason,
    }
