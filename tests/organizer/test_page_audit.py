"""The audit page (/organizer/audit/): the audit's findings and the flagged voters; not the
evaluation's results, the phases' timeline or the agents' budgets."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.services import agent_create
from evalsuite.models import EvalRun
from safety.models import Finding
from tests.evalsuite.conftest import stored_run
from tests.factories import running_phase
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/audit/"


@pytest.fixture
def a_finding(page_cluster):
    phase = running_phase()
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5}, agent=alice, label="alice-1")
    Finding.objects.create(
        agent=alice, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="<i>gsm8k</i> items in train.jsonl", evidence={}, fingerprint="x",
        status=Finding.Status.CONFIRMED, last_seen_at=timezone.now(),
    )  # fmt: skip
    return alice


def test_only_staff_see_it():
    assert_staff_only(URL)


def test_it_lists_the_findings_escaped_and_links_the_voters_page(organizer_staff, a_finding):
    page = organizer_staff.get(URL).content.decode()

    assert "Audit findings" in page and "&lt;i&gt;gsm8k&lt;/i&gt; items in train.jsonl" in page
    assert "replaced by the base model&#x27;s for: alice" in page
    assert '<a href="/organizer/voters/">voters page</a>' in page


def test_it_carries_no_other_pages_sections(organizer_staff, a_finding):
    page = organizer_staff.get(URL).content.decode()

    assert "Evaluation, phase-1" not in page and "Benchmark scores" not in page
    assert 'id="timeline"' not in page and "<meter" not in page


def test_the_nav_marks_it_and_every_link_answers(organizer_staff, a_finding):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Audit"]])
