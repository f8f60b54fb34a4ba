"""One agent's page (/organizer/agents/<name>/): its budget, jobs, nominations with their
cards, journal and results, a link to its livestream; nobody else's rows."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agents.journal import journal_add
from tests import factories
from tests.organizer import builders
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/agents/ann/"


@pytest.fixture
def ann_and_bob(page_cluster):
    phase = factories.running_phase(label="phase-1")
    ann, bob = builders.agent("ann"), builders.agent("bob")
    hour = timezone.now() - dt.timedelta(hours=4)
    sft = builders.job(ann, submitted=hour, runs=[(hour, hour + dt.timedelta(hours=2))], gpus=4, name="ann-sft")  # fmt: skip
    dpo = builders.job(bob, submitted=hour, state="RUNNING", name="bob-dpo")
    builders.nomination(ann, phase=phase, checkpoint=builders.checkpoint(ann, job=sft, at=hour))
    builders.nomination(
        bob,
        phase=phase,
        checkpoint=builders.checkpoint(bob, job=dpo, at=hour, path="bob-ckpt"),
        card=builders.CARD.replace("full SFT", "LoRA of bob"),
    )
    journal_add(agent=ann, text="ann: SFT first")
    journal_add(agent=bob, text="bob: DPO first")
    return ann, bob


def test_only_staff_see_it(ann_and_bob):
    assert_staff_only(URL)


def test_an_unknown_agent_is_404(organizer_staff):
    assert organizer_staff.get("/organizer/agents/nobody/").status_code == 404


def test_it_holds_the_agents_budget_jobs_nominations_and_journal(organizer_staff, ann_and_bob):
    page = organizer_staff.get(URL).content.decode()

    assert page.count("<meter") == 6  # its six budgets
    assert "8.0 / 100 GPU-h (8%)" in page  # 2 h on 4 GPUs
    assert "ann-sft" in page
    assert "full SFT" in page and "ckpt-1" in page and "Model card" in page
    assert "ann: SFT first" in page
    assert 'href="/organizer/agents/ann/live"' in page
    assert 'href="/organizer/cluster/?agent=ann#jobs"' in page


def test_it_carries_no_other_agents_rows_and_no_other_pages(organizer_staff, ann_and_bob):
    page = organizer_staff.get(URL).content.decode()

    assert "bob-dpo" not in page and "LoRA of bob" not in page and "bob: DPO first" not in page
    assert 'id="timeline"' not in page and 'id="cluster-title"' not in page
    assert "Audit findings" not in page


def test_the_nav_marks_agents_and_this_agent_and_every_link_answers(organizer_staff, ann_and_bob):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Agents"], URL])
