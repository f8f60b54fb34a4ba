"""Writes of the agents context: agents, their tokens, and the LLM API credit ledger."""

from __future__ import annotations

import hashlib
import logging
import secrets
from decimal import ROUND_UP, Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Agent, AgentToken, ProxyCall, Upstream

log = logging.getLogger(__name__)

MILLION = Decimal(1_000_000)
CENT_FRACTION = Decimal("0.000001")


class CreditExhausted(Exception):
    def __init__(self, *, needed: Decimal, left: Decimal) -> None:
        super().__init__(f"this call may cost up to ${needed}, and ${left} of credit is left")
        self.needed = needed
        self.left = left


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def agent_create(*, name: str, credit_limit: Decimal = Decimal("300")) -> Agent:
    return Agent.objects.create(name=name, credit_limit=credit_limit)


@transaction.atomic
def token_issue(*, agent: Agent, kind: str) -> str:
    """A new token of `kind` for the agent, revoking its previous ones; returned once, stored
    only as a hash."""
    AgentToken.objects.filter(agent=agent, kind=kind, revoked_at=None).update(
        revoked_at=timezone.now()
    )
    token = f"arena_{kind}_{secrets.token_urlsafe(32)}"
    AgentToken.objects.create(agent=agent, kind=kind, digest=token_digest(token))
    return token


def cost_usd(upstream: Upstream, *, prompt_tokens: int, completion_tokens: int) -> Decimal:
    cost = (
        prompt_tokens * upstream.usd_per_million_prompt_tokens
        + completion_tokens * upstream.usd_per_million_completion_tokens
    ) / MILLION
    return cost.quantize(CENT_FRACTION, rounding=ROUND_UP)


def credit_reserve(*, agent: Agent, amount: Decimal) -> None:
    """Hold `amount` of the agent's credit for a call in flight, or raise CreditExhausted.

    One conditional UPDATE: it succeeds only if the credit left covers the amount, so no
    interleaving of concurrent calls can reserve more than the agent has.
    """
    held = Agent.objects.filter(
        pk=agent.pk, credit_limit__gte=F("credit_spent") + F("credit_reserved") + amount
    ).update(credit_reserved=F("credit_reserved") + amount)
    if not held:
        agent.refresh_from_db()
        left = max(Decimal(0), agent.credit_limit - agent.credit_spent - agent.credit_reserved)
        raise CreditExhausted(needed=amount, left=left)


def credit_settle(*, agent: Agent, reserved: Decimal, cost: Decimal) -> Decimal:
    """Release a reservation and charge what the call cost (never more than was reserved:
    the reservation is the most the call could cost, so charging above it would mean the
    upstream ignored the token cap). Returns the amount charged."""
    charged = min(cost, reserved)
    if cost > reserved:
        log.warning(
            "agent %s: call cost %s above its reservation %s; charged the reservation",
            agent.name,
            cost,
            reserved,
        )
    Agent.objects.filter(pk=agent.pk).update(
        credit_reserved=F("credit_reserved") - reserved, credit_spent=F("credit_spent") + charged
    )
    return charged


def proxy_call_log(**fields: object) -> ProxyCall:
    return ProxyCall.objects.create(**fields)
