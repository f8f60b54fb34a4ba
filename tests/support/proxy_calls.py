"""An agent calling the proxy, as the proxy's tests see it: its token, and its calls settled."""

from __future__ import annotations

import time
from decimal import Decimal

from agents.models import Agent, ProxyCall
from agents.services import agent_create, token_issue

# A call is settled as its reply closes, and a call whose client hung up is settled when the
# proxy notices: beside the parallel suite that can take seconds. The wait ends once settled.
SETTLE_S = 60.0


def proxy_agent(name: str, credit: str = "100") -> tuple[Agent, str]:
    """A new agent with `credit` dollars, and a proxy token for it."""
    agent = agent_create(name=name, credit_limit=Decimal(credit))
    return agent, token_issue(agent=agent, kind="proxy")


def settled(agent: Agent, *, calls: int = 1, within_s: float = SETTLE_S) -> Agent:
    """The agent, refreshed, once `calls` of its calls are settled and nothing is reserved (or
    `within_s` has passed: the caller's assertions then say what is missing)."""
    deadline = time.monotonic() + within_s
    while True:
        agent.refresh_from_db()
        done = ProxyCall.objects.filter(agent=agent).exclude(status=0).count()
        if (done >= calls and agent.credit_reserved == 0) or time.monotonic() > deadline:
            return agent
        time.sleep(0.1)
