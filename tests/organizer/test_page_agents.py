"""The agents' index (/organizer/agents/): every agent's budget with a link to its page and
its livestream, and the journals and lock-in; not the phases', cluster's or evaluation's."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.journal import journal_add
from tests import factories
from tests.organizer import builders
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/agents/"


@pytest.fixture
def two_agents(page_cluster):
    factories.running_phase(label="phase-1")
    ann, bob = builders.agent("ann", gpu_hours=100), builders.agent("bob", credit=50)
    builders.proxy_call(bob, at=timezone.now(), cost="10.00")
    journal_add(agent=ann, text="<b>DPO</b> next", kind="decision")
    return ann, bob


def test_only_staff_see_it():
    assert_staff_only(URL)


def test_each_agent_has_its_budget_its_page_and_its_live_page(organizer_staff, two_agents):
    page = organizer_staff.get(URL).content.decode()

    assert page.count("<meter") == 2 * 6  # six budgets per agent
    assert "$10.00 / $50.00 (20%)" in page
    for name in ("ann", "bob"):
        assert f'<a href="/organizer/agents/{name}/">{name}</a>' in page
        assert f'href="/organizer/agents/{name}/live"' in page
    assert "Agents&#x27; experiment journals" in page and "&lt;b&gt;DPO&lt;/b&gt; next" in page


def test_it_carries_no_other_pages_sections(organizer_staff, two_agents):
    page = organizer_staff.get(URL).content.decode()

    assert 'id="timeline"' not in page and "Leaderboards by phase" not in page
    assert 'id="cluster-title"' not in page and "GPUs allocated" not in page
    assert "Audit findings" not in page and "Benchmark scores" not in page


def test_the_nav_marks_it_and_every_link_answers(organizer_staff, two_agents):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Agents"]])
