"""The LLM API credit ledger: reserve, settle, reconcile, and the phase grant.

`Agent` holds three columns: `credit_limit`, `credit_reserved` (the worst case of calls in
flight) and `credit_spent` (what settled calls cost). Each call is a `ProxyCall` row from the
moment it reserves; settling claims that row once (`settled_at`), so the proxy, its
background reader and the reconciler can race and still charge a call exactly once. Every
change of the agent's columns is one conditional UPDATE, and a database constraint holds
`spent + reserved <= limit`.

A second ledger, the scaffold's (`scaffold_credit_*`, issue 15, item 2), pays for the model
calls of the agent's harness itself, under a limit the organizers set. It has the same three
columns and the same guarantees; `ProxyCall.budget` says which ledger a call reserved on, and
settling and reconciling go back to that one. It has no phase grants: the organizers set its
limit (`scaffold_budget_set`), and a call on one ledger never touches the other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_UP, Decimal

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from agents.models import Agent, ProxyCall, Upstream

log = logging.getLogger(__name__)

MILLION = Decimal(1_000_000)
CENT_FRACTION = Decimal("0.000001")
# The longest a call may take, the upstream's whole answer included. The proxy gives up on
# an upstream after this long, so a reservation older than this (plus a margin for the
# settlement itself) belongs to a process that died: the reconciler settles it.
CALL_TIMEOUT_S = 900.0
RECONCILE_AFTER = timedelta(seconds=CALL_TIMEOUT_S + 60)


# The ledgers, by `ProxyCall.Budget` value.
API: str = "api"
SCAFFOLD: str = "scaffold"


@dataclass(frozen=True)
class _Ledger:
    """The agent's columns of one budget."""

    limit: str
    spent: str
    reserved: str
    granted: bool  # phase grants (`credit_period`) apply to it


LEDGERS: dict[str, _Ledger] = {
    API: _Ledger("credit_limit", "credit_spent", "credit_reserved", granted=True),
    SCAFFOLD: _Ledger(
        "scaffold_credit_limit", "scaffold_credit_spent", "scaffold_credit_reserved", granted=False
    ),
}


class CreditExhausted(Exception):
    def __init__(self, *, needed: Decimal, left: Decimal, budget: str = API) -> None:
        what = "scaffold credit" if budget == SCAFFOLD else "credit"
        super().__init__(f"this call may cost up to ${needed}, and ${left} of {what} is left")
        self.needed = needed
        self.left = left
        self.budget = budget


def credit_left(agent: Agent, budget: str = API) -> Decimal:
    """What the agent has left on one ledger, as of the row it was read with."""
    ledger = LEDGERS[budget]
    left = (
        getattr(agent, ledger.limit)
        - getattr(agent, ledger.spent)
        - getattr(agent, ledger.reserved)
    )
    return max(Decimal(0), left)


def cost_usd(upstream: Upstream, *, prompt_tokens: int, completion_tokens: int) -> Decimal:
    cost = (
        prompt_tokens * upstream.usd_per_million_prompt_tokens
        + completion_tokens * upstream.usd_per_million_completion_tokens
    ) / MILLION
    return cost.quantize(CENT_FRACTION, rounding=ROUND_UP)


@dataclass(frozen=True)
class Usage:
    """What an upstream reported it billed for one call, in tokens, whatever its protocol."""

    prompt: int  # every input token, cached or not
    completion: int  # every output token, reasoning and thinking included
    cached_prompt: int = 0  # of `prompt`: read from the upstream's prompt cache
    cache_write: int = 0  # of `prompt`: written to it (Anthropic bills these above the list)
    embedding: bool = False  # an embeddings call: `prompt` at the embedding price


def _or_prompt(price: Decimal | None, upstream: Upstream) -> Decimal:
    return upstream.usd_per_million_prompt_tokens if price is None else price


def usage_cost_usd(upstream: Upstream, usage: Usage) -> Decimal:
    """What `usage` costs at the upstream's prices: each kind of token at its own rate."""
    if usage.embedding:
        cost = usage.prompt * _or_prompt(upstream.usd_per_million_embedding_tokens, upstream)
        return (cost / MILLION).quantize(CENT_FRACTION, rounding=ROUND_UP)
    cached = min(usage.cached_prompt, usage.prompt)
    written = min(usage.cache_write, usage.prompt - cached)
    plain = usage.prompt - cached - written
    cost = (
        plain * upstream.usd_per_million_prompt_tokens
        + cached * _or_prompt(upstream.usd_per_million_cached_prompt_tokens, upstream)
        + written * _or_prompt(upstream.usd_per_million_cache_write_tokens, upstream)
        + usage.completion * upstream.usd_per_million_completion_tokens
    )
    return (cost / MILLION).quantize(CENT_FRACTION, rounding=ROUND_UP)


def bound_cost_usd(
    upstream: Upstream, *, prompt_tokens: int, completion_tokens: int, embedding: bool = False
) -> Decimal:
    """The most a call of at most these tokens can cost: every prompt token at the dearest of
    the prompt rates (a cache write costs more than a plain token, and the proxy cannot know
    which the upstream will bill), every completion token at the completion rate."""
    if embedding:
        return usage_cost_usd(upstream, Usage(prompt_tokens, 0, embedding=True))
    dearest = max(
        upstream.usd_per_million_prompt_tokens,
        _or_prompt(upstream.usd_per_million_cached_prompt_tokens, upstream),
        _or_prompt(upstream.usd_per_million_cache_write_tokens, upstream),
    )
    cost = prompt_tokens * dearest + completion_tokens * upstream.usd_per_million_completion_tokens
    return (cost / MILLION).quantize(CENT_FRACTION, rounding=ROUND_UP)


@transaction.atomic
def credit_reserve(
    *,
    agent: Agent,
    amount: Decimal,
    model: str,
    stream: bool,
    budget: str = API,
    protocol: str = "chat",
) -> ProxyCall:
    """Hold `amount` of the agent's credit on `budget`'s ledger for a new call, or raise
    CreditExhausted. The other ledger is never a fallback.

    One conditional UPDATE: it succeeds only if the credit left covers the amount, so no
    interleaving of concurrent calls can reserve more than the agent has. The call's row is
    written in the same transaction, with the grant it reserved under (the UPDATE holds the
    agent's row, so a phase grant cannot slip in between).
    """
    ledger = LEDGERS[budget]
    held = Agent.objects.filter(
        pk=agent.pk, **{f"{ledger.limit}__gte": F(ledger.spent) + F(ledger.reserved) + amount}
    ).update(**{ledger.reserved: F(ledger.reserved) + amount})
    if not held:
        agent.refresh_from_db()
        raise CreditExhausted(needed=amount, left=credit_left(agent, budget), budget=budget)
    period = Agent.objects.values_list("credit_period", flat=True).get(pk=agent.pk)
    return ProxyCall.objects.create(
        agent=agent,
        model=model,
        stream=stream,
        reserved_usd=amount,
        credit_period=period,
        budget=budget,
        protocol=protocol,
    )


@transaction.atomic
def credit_settle(
    *,
    call: ProxyCall,
    cost: Decimal,
    status: int,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    latency_ms: int = 0,
    error: str = "",
    cached_prompt_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Decimal | None:
    """Release the call's reservation and charge what it cost. Returns the amount charged, or
    None if the call was already settled (by the reconciler, or the reverse).

    The charge is what the upstream bills, even above the reservation (the reservation is an
    upper bound, so that would mean the bound is wrong: it is logged as an error). Only what
    the agent's credit cannot cover is left uncharged, and the call's error says so.
    """
    claimed = ProxyCall.objects.filter(pk=call.pk, settled_at=None).update(
        settled_at=timezone.now()
    )
    if not claimed:
        log.info("proxy call %s was already settled", call.pk)
        return None
    reserved = call.reserved_usd
    charged = cost
    if not _ledger_settle(call, reserved=reserved, charge=cost):
        # Billed above the reservation and above what is left: charge all that is left.
        agent = Agent.objects.select_for_update().get(pk=call.agent_id)
        charged = reserved + credit_left(agent, call.budget)
        if not _ledger_settle(call, reserved=reserved, charge=charged):
            raise AssertionError(f"proxy call {call.pk}: the ledger refused ${charged}")
    if cost > reserved:
        log.error(
            "proxy call %s of agent %s: the upstream billed $%s, above its reservation $%s; "
            "charged $%s",
            call.pk, call.agent_id, cost, reserved, charged,
        )  # fmt: skip
        note = f"billed ${cost} above the reservation ${reserved}; charged ${charged}"
        error = f"{error}; {note}" if error else note
    ProxyCall.objects.filter(pk=call.pk).update(
        status=status,
        prompt_tokens=prompt_tokens,
        cached_prompt_tokens=cached_prompt_tokens,
        cache_write_tokens=cache_write_tokens,
        completion_tokens=completion_tokens,
        cost_usd=charged,
        latency_ms=latency_ms,
        error=error[:300],
    )
    return charged


def _ledger_settle(call: ProxyCall, *, reserved: Decimal, charge: Decimal) -> bool:
    """Move the call from reserved to spent, on the ledger it reserved on. A call reserved
    under an earlier phase grant also takes its unused reservation (or its overrun) out of
    the limit, so what the new grant leaves the agent is exactly the grant: nothing carries
    over. The scaffold ledger has no grants: its limit is the organizers' and never moves."""
    ledger = LEDGERS[call.budget]
    if not ledger.granted:
        covered = Q(
            **{f"{ledger.limit}__gte": F(ledger.spent) + F(ledger.reserved) - reserved + charge}
        )
        return bool(
            Agent.objects.filter(Q(pk=call.agent_id) & covered).update(
                **{
                    ledger.reserved: F(ledger.reserved) - reserved,
                    ledger.spent: F(ledger.spent) + charge,
                }
            )
        )
    earlier_grant = Q(credit_period__gt=call.credit_period)
    covered = Q(credit_limit__gte=F("credit_spent") + F("credit_reserved") - reserved + charge)
    return bool(
        Agent.objects.filter(Q(pk=call.agent_id) & (earlier_grant | covered)).update(
            credit_reserved=F("credit_reserved") - reserved,
            credit_spent=F("credit_spent") + charge,
            credit_limit=Case(
                When(credit_period=call.credit_period, then=F("credit_limit")),
                default=F("credit_limit") - Value(reserved) + Value(charge),
            ),
        )
    )


def credit_reservations_reconcile(*, older_than: timedelta = RECONCILE_AFTER) -> list[ProxyCall]:
    """Settle every call still in flight after `older_than`: its process died (a restart, a
    crash) before it could settle. What the upstream billed is unknown, so the call is
    charged its reservation, the most it could have cost, on the ledger it reserved on (API
    credit or scaffold credit). Returns the calls it settled."""
    cutoff = timezone.now() - older_than
    settled = []
    stale = ProxyCall.objects.filter(settled_at=None, created_at__lt=cutoff).select_related("agent")
    for call in stale:
        charged = credit_settle(
            call=call,
            cost=call.reserved_usd,
            status=504,
            error="never settled by the proxy; charged its reservation",
        )
        if charged is not None:
            settled.append(call)
    return settled


def proxy_call_log(**fields: object) -> ProxyCall:
    """A call that reserved nothing (refused for credit): logged as settled."""
    return ProxyCall.objects.create(settled_at=timezone.now(), **fields)


def credit_phase_grant(*, agent_ids: list[int], amount: Decimal) -> int:
    """Give each agent `amount` of credit for a new phase, on top of what it has spent. The
    scaffold ledger is the organizers' to set and is left alone.

    The limit also covers what is reserved now, so calls in flight keep their reservations;
    `credit_period` moves on, and each of those calls, when it settles, takes its unused
    reservation out of the limit (`_ledger_settle`). Once all have settled the limit is
    settled spending plus `amount`: unused reservations never carry over.
    """
    return Agent.objects.filter(pk__in=agent_ids).update(
        credit_limit=F("credit_spent") + F("credit_reserved") + amount,
        credit_period=F("credit_period") + 1,
    )


class ScaffoldBudgetBelowSpending(ValueError):
    pass


def scaffold_budget_set(*, agent: Agent, limit_usd: Decimal) -> Agent:
    """Set the agent's scaffold budget (issue 15, item 2): what its harness's own model calls
    may cost in all, apart from its API credit. Never below what is spent and reserved."""
    if limit_usd < 0:
        raise ValueError("a scaffold budget cannot be negative")
    changed = Agent.objects.filter(
        pk=agent.pk, scaffold_credit_spent__lte=limit_usd - F("scaffold_credit_reserved")
    ).update(scaffold_credit_limit=limit_usd)
    agent.refresh_from_db()
    if not changed:
        raise ScaffoldBudgetBelowSpending(
            f"{agent.name} has spent ${agent.scaffold_credit_spent} and reserved "
            f"${agent.scaffold_credit_reserved} of its scaffold budget: ${limit_usd} is less"
        )
    return agent
