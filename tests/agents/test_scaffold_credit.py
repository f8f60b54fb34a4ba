"""The scaffold's own ledger (issue 15, item 2): the harness's model calls are billed apart from
the agent's API credit, with the same guarantees, and neither ledger ever pays for the other."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx2
import pytest
from django.db import connection
from django.utils import timezone

from agents.credit import (
    RECONCILE_AFTER,
    CreditExhausted,
    credit_phase_grant,
    credit_reservations_reconcile,
    credit_reserve,
    credit_settle,
    scaffold_budget_set,
)
from agents.models import Agent, ProxyCall, TrajectoryEvent, Upstream
from agents.selectors import proxy_caller
from agents.services import agent_create, judge_token_issue, scaffold_token_issue, token_issue
from tests.support.billing_llm import BillingLLM

SCAFFOLD = ProxyCall.Budget.SCAFFOLD


def _agent(name: str, *, credit: str = "300", scaffold: str = "10") -> Agent:
    agent = agent_create(name=name, credit_limit=Decimal(credit))
    return scaffold_budget_set(agent=agent, limit_usd=Decimal(scaffold))


def _reserve(agent: Agent, amount: str, *, budget: str = SCAFFOLD) -> ProxyCall:
    return credit_reserve(
        agent=agent, amount=Decimal(amount), model="m", stream=False, budget=budget
    )


def _columns(agent: Agent) -> dict[str, Decimal]:
    agent.refresh_from_db()
    return {
        name: getattr(agent, name)
        for name in (
            "credit_limit", "credit_spent", "credit_reserved",
            "scaffold_credit_limit", "scaffold_credit_spent", "scaffold_credit_reserved",
        )
    }  # fmt: skip


@pytest.mark.django_db
def test_a_scaffold_call_reserves_and_settles_on_the_scaffold_ledger_only():
    agent = _agent("scaf")
    call = _reserve(agent, "2")
    assert call.budget == SCAFFOLD
    assert _columns(agent)["scaffold_credit_reserved"] == Decimal("2")

    assert credit_settle(call=call, cost=Decimal("0.5"), status=200) == Decimal("0.5")

    assert _columns(agent) == {
        "credit_limit": Decimal("300"), "credit_spent": 0, "credit_reserved": 0,
        "scaffold_credit_limit": Decimal("10"), "scaffold_credit_spent": Decimal("0.5"),
        "scaffold_credit_reserved": 0,
    }  # fmt: skip


@pytest.mark.django_db
def test_an_api_call_never_moves_the_scaffold_ledger():
    agent = _agent("apionly")
    call = _reserve(agent, "3", budget=ProxyCall.Budget.API)
    credit_settle(call=call, cost=Decimal("1"), status=200)
    columns = _columns(agent)
    assert columns["credit_spent"] == Decimal("1")
    assert columns["scaffold_credit_spent"] == 0 and columns["scaffold_credit_reserved"] == 0


@pytest.mark.django_db
def test_out_of_scaffold_credit_the_api_credit_is_never_a_fallback():
    agent = _agent("broke", scaffold="1")
    _reserve(agent, "0.75")
    with pytest.raises(CreditExhausted) as refused:
        _reserve(agent, "0.5")
    assert refused.value.budget == SCAFFOLD and refused.value.left == Decimal("0.25")
    assert "scaffold credit" in str(refused.value)
    columns = _columns(agent)
    assert columns["credit_reserved"] == 0 and columns["credit_spent"] == 0
    assert ProxyCall.objects.filter(agent=agent).count() == 1


@pytest.mark.django_db
def test_a_scaffold_call_billed_above_what_is_left_is_charged_what_is_left():
    agent = _agent("over", scaffold="2")
    call = _reserve(agent, "1")
    assert credit_settle(call=call, cost=Decimal("50"), status=200) == Decimal("2")
    columns = _columns(agent)
    assert columns["scaffold_credit_spent"] == Decimal("2") and columns["credit_spent"] == 0


@pytest.mark.django_db
def test_the_reconciler_settles_a_scaffold_reservation_on_its_ledger():
    agent = _agent("lostscaf")
    stale = _reserve(agent, "2")
    ProxyCall.objects.filter(pk=stale.pk).update(
        created_at=timezone.now() - RECONCILE_AFTER - timedelta(seconds=1)
    )

    assert [call.pk for call in credit_reservations_reconcile()] == [stale.pk]

    columns = _columns(agent)
    assert columns["scaffold_credit_spent"] == Decimal("2")
    assert columns["scaffold_credit_reserved"] == 0
    assert columns["credit_spent"] == 0 and columns["credit_reserved"] == 0


@pytest.mark.django_db
def test_a_phase_grant_leaves_the_scaffold_ledger_alone():
    agent = _agent("granted", scaffold="10")
    in_flight = _reserve(agent, "4")
    spent = _reserve(agent, "1")
    credit_settle(call=spent, cost=Decimal("1"), status=200)

    credit_phase_grant(agent_ids=[agent.pk], amount=Decimal("50"))
    credit_settle(call=in_flight, cost=Decimal("0.5"), status=200)

    columns = _columns(agent)
    assert columns["scaffold_credit_limit"] == Decimal("10")  # the organizers' number, as set
    assert columns["scaffold_credit_spent"] == Decimal("1.5")
    assert columns["scaffold_credit_reserved"] == 0
    assert columns["credit_limit"] == Decimal("50") and columns["credit_spent"] == 0


@pytest.mark.django_db
def test_each_token_kind_bills_its_own_ledger():
    agent = _agent("tokens")
    _, judge = judge_token_issue(agent=agent)
    tokens = {
        token_issue(agent=agent, kind="proxy"): ProxyCall.Budget.API,
        judge: ProxyCall.Budget.API,
        scaffold_token_issue(agent=agent): SCAFFOLD,
    }
    for token, budget in tokens.items():
        assert proxy_caller(token) == (agent, budget)
    assert proxy_caller(token_issue(agent=agent, kind="api")) is None  # the agent API's token


@pytest.mark.django_db(transaction=True)
def test_concurrent_scaffold_reservations_never_overspend():
    agent = _agent("racer", scaffold="1")
    start = threading.Barrier(16)
    outcomes: list[str] = []

    def reserve() -> None:
        try:
            start.wait()
            _reserve(agent, "0.15")
            outcomes.append("held")
        except CreditExhausted:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("held") == 6 and outcomes.count("refused") == 10  # 6 × 0.15 ≤ 1
    columns = _columns(agent)
    assert columns["scaffold_credit_reserved"] == Decimal("0.9")
    assert columns["credit_reserved"] == 0


# --- through the live proxy ---------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def billing_llm():
    server = BillingLLM()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def billing_upstream(billing_llm) -> Upstream:
    billing_llm.reset()
    return Upstream.objects.create(
        name="billing", base_url=billing_llm.base_url, upstream_model="billing",
        usd_per_million_prompt_tokens=Decimal("2.50"),
        usd_per_million_completion_tokens=Decimal("10"), max_completion_tokens=4096,
    )  # fmt: skip


def _post(arena, token: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(
        f"{arena.url}/proxy/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )


def _settled(agent: Agent, *, within_s: float = 15) -> dict[str, Decimal]:
    deadline = time.monotonic() + within_s
    while ProxyCall.objects.filter(agent=agent, status=0).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _columns(agent)


@pytest.mark.slow
def test_concurrent_scaffold_calls_through_the_proxy_stop_at_the_scaffold_budget(
    arena, billing_upstream, billing_llm
):
    # Each call reserves about $0.005 (500 completion tokens at $10/M plus the prompt bound).
    agent = _agent("harness", credit="300", scaffold="0.03")
    token = scaffold_token_issue(agent=agent)
    bodies = [
        {"model": "billing", "messages": MESSAGES, "max_tokens": 500, "stream": i % 2 == 0}
        for i in range(16)
    ]
    start = threading.Barrier(len(bodies))

    def call(body: dict[str, Any]) -> httpx2.Response:
        start.wait()
        return _post(arena, token, body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        replies = list(pool.map(call, bodies))

    statuses = [reply.status_code for reply in replies]
    assert set(statuses) == {200, 402}, statuses
    refused = next(reply for reply in replies if reply.status_code == 402).json()["error"]
    assert refused["code"] == "scaffold_credit_exhausted"
    assert refused["type"] == "insufficient_quota"
    columns = _settled(agent)
    assert columns["scaffold_credit_reserved"] == 0
    assert 0 < columns["scaffold_credit_spent"] <= Decimal("0.03")
    # The agent's own $300 was never touched, not even as a fallback for the refused calls.
    assert columns["credit_spent"] == 0 and columns["credit_reserved"] == 0
    calls = ProxyCall.objects.filter(agent=agent)
    assert {call.budget for call in calls} == {SCAFFOLD}
    assert sum((c.cost_usd for c in calls), Decimal(0)) == columns["scaffold_credit_spent"]
    model_calls = TrajectoryEvent.objects.filter(agent=agent, kind="model_call")
    assert {event.payload["budget"] for event in model_calls} == {"scaffold"}


@pytest.mark.slow
def test_the_agents_own_proxy_token_never_moves_the_scaffold_ledger(
    arena, billing_upstream, billing_llm
):
    agent = _agent("own", credit="300", scaffold="0")  # no scaffold budget at all
    proxy_token = token_issue(agent=agent, kind="proxy")
    body = {"model": "billing", "messages": MESSAGES, "max_tokens": 50}

    assert _post(arena, proxy_token, body).status_code == 200
    refused = _post(arena, scaffold_token_issue(agent=agent), body)

    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "scaffold_credit_exhausted"
    columns = _settled(agent)
    assert columns["credit_spent"] > 0
    assert columns["scaffold_credit_spent"] == 0 and columns["scaffold_credit_reserved"] == 0
    assert ProxyCall.objects.get(agent=agent, status=200).budget == ProxyCall.Budget.API


def test_the_ledgers_are_the_proxy_calls_budgets():
    from agents.credit import LEDGERS

    assert set(LEDGERS) == set(ProxyCall.Budget.values)
