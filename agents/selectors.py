from __future__ import annotations

from agents.models import Agent, AgentToken, Upstream
from agents.services import token_digest


def agent_for_token(token: str, *, kind: str) -> Agent | None:
    found = (
        AgentToken.objects.filter(
            digest=token_digest(token), kind=kind, revoked_at=None, agent__active=True
        )
        .select_related("agent")
        .first()
    )
    return found.agent if found else None


def upstreams_active() -> list[Upstream]:
    return list(Upstream.objects.filter(active=True).order_by("name"))
