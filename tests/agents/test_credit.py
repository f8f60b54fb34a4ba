"""The credit ledger's reconciliation and phase grants: a reservation never leaks, and unused
reservations never carry over into a new phase's credit."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.credit import (
    RECONCILE_AFTER,
    credit_phase_grant,
    credit_reservations_reconcile,
    credit_reserve,
    credit_settle,
)
from agents.models import Agent, ProxyCall
from agents.services import agent_create

pytestmark = pytest.mark.django_db


def _left(agent: Agent) -> Decimal:
    agent.refresh_from_db()
    return agent.credit_limit - agent.credit_spent - agent.credit_reserved


def _reserve(agent: Agent, amount: str, *, age: timedelta = timedelta(0)) -> ProxyCall:
    call = credit_reserve(agent=agent, amount=Decimal(amount), model="m", stream=False)
    ProxyCall.objects.filter(pk=call.pk).update(created_at=timezone.now() - age)
    call.refresh_from_db()
    return call


def test_a_reservation_older_than_a_call_is_charged_in_full_and_released():
    agent = agent_create(name="lost", credit_limit=Decimal("10"))
    stale = _reserve(agent, "2", age=RECONCILE_AFTER + timedelta(seconds=1))
    fresh = _reserve(agent, "3")

    settled = credit_reservations_reconcile()

    assert [call.pk for call in settled] == [stale.pk]
    stale.refresh_from_db()
    assert stale.settled_at is not None and stale.cost_usd == Decimal("2")
    assert stale.status == 504 and "reservation" in stale.error
    agent.refresh_from_db()
    assert agent.credit_spent == Decimal("2") and agent.credit_reserved == Decimal("3")
    fresh.refresh_from_db()
    assert fresh.settled_at is None


def test_a_call_settles_once_whoever_comes_first():
    agent = agent_create(name="race", credit_limit=Decimal("10"))
    call = _reserve(agent, "2", age=RECONCILE_AFTER + timedelta(seconds=1))
    assert credit_reservations_reconcile()
    # The proxy's own settlement arrives late: it changes nothing.
    assert credit_settle(call=call, cost=Decimal("1"), status=200) is None
    agent.refresh_from_db()
    assert agent.credit_spent == Decimal("2") and agent.credit_reserved == 0
    assert credit_reservations_reconcile() == []


def test_the_reconciler_runs_as_a_command():
    agent = agent_create(name="cmd", credit_limit=Decimal("10"))
    _reserve(agent, "1", age=RECONCILE_AFTER + timedelta(seconds=1))
    out = StringIO()
    call_command("agents", "reconcile-credit", stdout=out)
    assert "settled 1 reservation" in out.getvalue()
    agent.refresh_from_db()
    assert agent.credit_reserved == 0


def test_a_reservation_in_flight_at_a_new_phase_leaves_exactly_the_new_credit():
    agent = agent_create(name="carry", credit_limit=Decimal("10"))
    call = _reserve(agent, "4")  # a big reservation in flight when the phase starts

    credit_phase_grant(agent_ids=[agent.pk], amount=Decimal("5"))
    assert _left(agent) == Decimal("5")
    credit_settle(call=call, cost=Decimal("0.5"), status=200)  # it settles low after the reset

    assert _left(agent) == Decimal("5")  # the unused $3.50 stayed with the old phase
    agent.refresh_from_db()
    assert agent.credit_limit == agent.credit_spent + Decimal("5")
    assert agent.credit_reserved == 0


def test_a_call_billed_above_its_reservation_is_charged_what_was_billed():
    agent = agent_create(name="over", credit_limit=Decimal("10"))
    call = _reserve(agent, "1")
    assert credit_settle(call=call, cost=Decimal("3"), status=200) == Decimal("3")
    call.refresh_from_db()
    assert call.cost_usd == Decimal("3") and "above the reservation" in call.error
    # Above what is left as well: all that is left is charged, and the call says so.
    call = _reserve(agent, "1")
    assert credit_settle(call=call, cost=Decimal("50"), status=200) == Decimal("7")
    assert _left(agent) == 0
    call.refresh_from_db()
    assert "charged $7" in call.error


def test_each_round_of_the_phase_worker_reconciles():
    from arena.phases.management.commands.phases import Command as PhaseWorker

    agent = agent_create(name="worker", credit_limit=Decimal("10"))
    call = _reserve(agent, "1", age=RECONCILE_AFTER + timedelta(seconds=1))
    out = StringIO()
    PhaseWorker(stdout=out)._reconcile_credit()  # what `phases run` does every round
    assert f"call {call.pk} settled at its reservation" in out.getvalue()
    agent.refresh_from_db()
    assert agent.credit_reserved == 0 and agent.credit_spent == Decimal("1")
