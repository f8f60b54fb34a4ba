"""Organizers set and see the scaffold budget (issue 15, item 2); the agent reads it, never
sets it."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agents.agent_cli import show_budget
from agents.credit import credit_reserve
from agents.models import Agent, ProxyCall
from agents.services import token_issue
from tests.organizer import builders

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann() -> Agent:
    return builders.agent("ann", credit=300)


def _set(*args: str) -> str:
    out = StringIO()
    call_command("agents", "scaffold-budget", *args, stdout=out)
    return out.getvalue()


def test_an_organizer_sets_the_scaffold_budget_and_sees_it_listed(ann):
    assert "ann: scaffold budget $25.00 ($0.00 spent)" in _set("ann", "25")
    ann.refresh_from_db()
    assert ann.scaffold_credit_limit == Decimal("25")
    assert ann.credit_limit == Decimal("300")  # the agent's own credit is another ledger

    out = StringIO()
    call_command("agents", "list", stdout=out)
    assert "credit $0.00/$300.00  scaffold $0.00/$25.00" in out.getvalue()


@pytest.mark.parametrize(
    ("usd", "message"),
    [
        ("-1", "cannot be negative"),
        ("ten", "not an amount of USD"),
        ("NaN", "not an amount of USD"),
        ("1e12", r"below \$100,000,000"),
    ],
)
def test_a_bad_amount_is_a_clear_error_and_changes_nothing(ann, usd, message):
    with pytest.raises(CommandError, match=message):
        _set("ann", usd)
    ann.refresh_from_db()
    assert ann.scaffold_credit_limit == 0


def test_the_budget_cannot_go_below_what_the_scaffold_spent_and_holds(ann):
    _set("ann", "10")
    credit_reserve(
        agent=ann, amount=Decimal("4"), model="m", stream=False, budget=ProxyCall.Budget.SCAFFOLD
    )
    with pytest.raises(
        CommandError, match=r"reserved \$4\.000000 of its scaffold budget: \$3\.000000 is less"
    ):
        _set("ann", "3")
    assert "scaffold budget $4.00" in _set("ann", "4")


def test_an_unknown_agent_is_a_clear_error():
    with pytest.raises(CommandError, match="no agent called 'nobody'"):
        _set("nobody", "5")


def test_the_admin_shows_the_scaffold_ledger_read_only(ann):
    _set("ann", "25")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))

    listing = client.get(reverse("admin:agents_agent_changelist")).content.decode()
    assert "scaffold credit limit" in listing.lower()
    change = reverse("admin:agents_agent_change", args=[ann.pk])
    page = client.get(change).content.decode()
    assert 'name="scaffold_credit_limit"' not in page  # shown, not an input
    assert "25.000000" in page

    client.post(change, {"name": "ann", "active": "on", "credit_limit": "300",
                         "credit_period": "0", "scaffold_credit_limit": "9999"})  # fmt: skip
    ann.refresh_from_db()
    assert ann.scaffold_credit_limit == Decimal("25")


def test_the_agent_reads_its_scaffold_credit_in_the_api_and_the_cli(ann):
    _set("ann", "20")
    credit_reserve(
        agent=ann, amount=Decimal("1.5"), model="m", stream=False, budget=ProxyCall.Budget.SCAFFOLD
    )
    token = token_issue(agent=ann, kind="api")

    budget = Client().get("/api/v1/budget", HTTP_AUTHORIZATION=f"Bearer {token}").json()

    assert budget["scaffold_credit_usd"] == {
        "spent": 0.0, "in_flight": 1.5, "limit": 20.0, "left": 18.5,
    }  # fmt: skip
    assert budget["api_credit_usd"]["left"] == 300.0
    assert "scaffold      $0.00 spent, $18.50 left of $20" in show_budget(budget)
    # Read only: the agent API has no route that changes it.
    assert Client().post(
        "/api/v1/budget", {}, HTTP_AUTHORIZATION=f"Bearer {token}"
    ).status_code in {
        404,
        405,
    }


def test_the_dashboard_budget_table_shows_the_scaffold_credit(ann):
    _set("ann", "20")
    credit_reserve(
        agent=ann, amount=Decimal("5"), model="m", stream=False, budget=ProxyCall.Budget.SCAFFOLD
    )
    client = Client()
    client.force_login(User.objects.create_user("org", password="x", is_staff=True))

    page = client.get("/organizer/agents/").content.decode()

    assert "<th>Scaffold credit</th>" in page
    assert "$5.00 / $20.00 (25%)" in page


def test_the_admin_lists_which_ledger_each_call_billed(ann):
    _set("ann", "20")
    credit_reserve(
        agent=ann, amount=Decimal("1"), model="m", stream=False, budget=ProxyCall.Budget.SCAFFOLD
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    listing = reverse("admin:agents_proxycall_changelist")
    assert "the scaffold&#x27;s credit" in client.get(listing).content.decode()
    assert "0 proxy calls" in client.get(listing, {"budget__exact": "api"}).content.decode()
