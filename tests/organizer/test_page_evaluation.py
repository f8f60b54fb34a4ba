"""The evaluation page (/organizer/evaluation/): the phases' benchmark results and the
correlations; not the audit's findings, the phases' timeline or the agents' budgets."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.services import agent_create
from evalsuite.models import EvalRun
from safety.models import Finding
from tests.evalsuite.conftest import instruct_below_base_phase, stored_run
from tests.factories import running_phase
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/evaluation/"


@pytest.fixture
def evaluated_phase(page_cluster):
    phase = running_phase()
    stored_run(phase, "base", {"gsm8k": 0.2, "mmlu": 0.4})
    stored_run(phase, "instruct", {"gsm8k": 0.6, "mmlu": 0.8})
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5, "mmlu": 0.5}, agent=alice, label="alice-1")  # fmt: skip
    Finding.objects.create(
        agent=alice, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="gsm8k items in train.jsonl", evidence={}, fingerprint="x",
        last_seen_at=timezone.now(),
    )  # fmt: skip
    return phase


def test_only_staff_see_it():
    assert_staff_only(URL)


def test_it_shows_each_phases_results_and_the_correlations(organizer_staff, evaluated_phase):
    page = organizer_staff.get(URL).content.decode()

    assert "Evaluation, phase-1" in page and "alice-1" in page and "+0.50" in page
    assert "Benchmark scores, phase-1" in page
    assert "Correlations, test" in page


def test_a_phase_where_instruct_never_beats_base_shows_no_headline_and_why(
    organizer_staff, page_cluster
):
    instruct_below_base_phase("zed")  # the demo's winogrande: it showed "+1.00 ± 0.000"
    page = organizer_staff.get(URL).content.decode()

    assert "zed-1" in page and "+1.00" not in page
    assert "no benchmark where instruct beats base" in page
    assert "winogrande (instruct not above base: 0.000 vs 0.600)" in page


def test_with_no_results_it_says_so(organizer_staff, page_cluster):
    assert "No evaluation results yet." in organizer_staff.get(URL).content.decode()


def test_it_carries_no_other_pages_sections(organizer_staff, evaluated_phase):
    page = organizer_staff.get(URL).content.decode()

    assert "Audit findings" not in page and "gsm8k items in train.jsonl" not in page
    assert 'id="timeline"' not in page and "<meter" not in page


def test_the_nav_marks_it_and_every_link_answers(organizer_staff, evaluated_phase):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Evaluation"]])
