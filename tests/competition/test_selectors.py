from datetime import timedelta

import pytest
from django.utils import timezone

from arena.competition.models import Competition, Phase
from arena.competition.selectors import competition_current

pytestmark = pytest.mark.django_db


def competition_with_phase(name: str, state: str, *, started_hours_ago: float) -> Competition:
    competition = Competition.objects.create(name=name, base_model="/models/base")
    starts = timezone.now() - timedelta(hours=started_hours_ago)
    Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=state,
        starts_at=starts, ends_at=starts + timedelta(days=6),
    )  # fmt: skip
    return competition


def test_with_no_phase_begun_the_newest_planned_competition_is_current():
    Competition.objects.create(name="older", base_model="/m")
    newest = competition_with_phase("newest", Phase.State.SCHEDULED, started_hours_ago=-5)
    assert competition_current() == newest


def test_the_latest_phase_that_began_names_the_competition():
    competition_with_phase("closed-long-ago", Phase.State.CLOSED, started_hours_ago=100)
    recent = competition_with_phase("frozen-lately", Phase.State.FROZEN, started_hours_ago=10)
    assert competition_current() == recent


def test_a_running_phase_comes_before_a_later_frozen_one():
    running = competition_with_phase("running", Phase.State.RUNNING, started_hours_ago=50)
    competition_with_phase("frozen-later", Phase.State.FROZEN, started_hours_ago=10)
    assert competition_current() == running


def test_the_phase_the_arena_serves_comes_first_in_one_query(django_assert_num_queries):
    competition_with_phase("running-later", Phase.State.RUNNING, started_hours_ago=5)
    serving = competition_with_phase("serving", Phase.State.SERVING, started_hours_ago=50)
    with django_assert_num_queries(1):
        assert competition_current().name == serving.name
