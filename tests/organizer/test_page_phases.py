"""The organizer's overview (/organizer/): the phases, a summary of the other pages, the
nominations per phase and the leaderboards; nothing of the agents', cluster's or audit's pages."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agents.journal import journal_add
from agents.models import NomineeCopy
from arena.competition.models import Phase
from tests import factories
from tests.organizer import builders
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/"


@pytest.fixture
def phase_with_a_nomination(page_cluster):
    phase = factories.running_phase(label="phase-1")
    Phase.objects.filter(pk=phase.pk).update(ends_at=timezone.now() + dt.timedelta(hours=3))
    ann = builders.agent("ann")
    now = timezone.now()
    sft = builders.job(ann, submitted=now, name="ann-sft")
    nomination = builders.nomination(
        ann, phase=phase, checkpoint=builders.checkpoint(ann, job=sft, at=now)
    )
    NomineeCopy.objects.create(
        nomination=nomination, not_servable_reason="model.safetensors: sha256 differs"
    )
    journal_add(agent=ann, text="trying DPO next")
    factories.rating_snapshot("phase-1", {"ann-model": 1010.0, "tiny-instruct": 990.0})
    return ann


def test_only_staff_see_it():
    assert_staff_only(URL)


def test_it_shows_the_timeline_the_nominations_and_the_leaderboards(
    organizer_staff, phase_with_a_nomination
):
    page = organizer_staff.get(URL).content.decode()

    assert "phase-1 freezes in 2 h" in page and 'id="next-up"' in page
    # Each nomination names its agent's page and why the arena does not serve it.
    assert 'href="/organizer/agents/ann/#nominations"' in page
    assert "not servable:</strong> model.safetensors: sha256 differs" in page
    assert "Style-controlled" in page and "ann-model" in page


def test_its_summary_links_every_other_page_with_figures(organizer_staff, phase_with_a_nomination):
    page = organizer_staff.get(URL).content.decode()

    assert '<a href="/organizer/agents/">Agents</a></dt><dd>1 active of 1</dd>' in page
    assert '<a href="/organizer/cluster/">Cluster</a></dt><dd>0 jobs running' in page
    assert 'href="/organizer/evaluation/">Evaluation and audit</a>' in page
    assert 'href="/organizer/audit/">Audit findings</a></dt><dd>0 open' in page


def test_it_carries_no_other_pages_sections(organizer_staff, phase_with_a_nomination):
    page = organizer_staff.get(URL).content.decode()

    assert "Model card" not in page and "full SFT" not in page  # the agent's page has cards
    assert "<meter" not in page and "GPU-h" not in page  # budgets: the agents' page
    assert 'id="cluster-title"' not in page and "ann-sft" not in page  # the cluster's
    assert "trying DPO next" not in page  # the journal: the agents' pages
    assert "Findings and flags" not in page


def test_the_nav_marks_it_and_every_link_answers(organizer_staff, phase_with_a_nomination):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Phases"]])


def test_the_old_job_filter_goes_to_the_cluster_pages_jobs(organizer_staff):
    reply = organizer_staff.get(URL + "?agent=ben&x=1")
    assert reply.status_code == 302
    assert reply["Location"] == "/organizer/cluster/?agent=ben#jobs"
