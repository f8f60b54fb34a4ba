"""The organizer moving the calendar ahead (as the demo does once every agent has nominated):
a phase's training ends now, or its arena closes now and the next phase starts, keeping its
length. Never an end moved later, never another competition's phases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from arena.competition.models import Phase
from arena.phases.selectors import arena_closes_at
from arena.phases.services import competition_plan, phase_arena_close_early, phase_end_early

pytestmark = pytest.mark.django_db


def plan(start_offset: timedelta, *, name: str = "cup"):
    """Two phases: each trains 2 h, then its arena runs 1 h."""
    return competition_plan(
        name=name,
        base_model="/models/base",
        instruct_model="/models/instruct",
        starts_at=timezone.now() + start_offset,
        phase_lengths=[timedelta(hours=2), timedelta(hours=2)],
        arena_length=timedelta(hours=1),
    )


def phases(competition) -> tuple[Phase, Phase]:
    one, two = competition.phases.order_by("number")
    return one, two


def test_a_running_phase_ends_now_and_its_arena_keeps_its_close():
    one, _ = phases(plan(-timedelta(minutes=30)))
    now = timezone.now()
    phase_end_early(phase=one, now=now)
    one.refresh_from_db()
    assert one.ends_at == now
    assert one.arena_closes_at > now + timedelta(hours=2)  # the arena's close is not moved


def test_an_ended_phase_is_not_ended_again_later():
    one, _ = phases(plan(-timedelta(hours=2, minutes=30)))  # trained until 30 min ago
    ended = one.ends_at
    phase_end_early(phase=one)
    one.refresh_from_db()
    assert one.ends_at == ended


def test_a_phase_that_has_not_begun_cannot_end():
    one, _ = phases(plan(timedelta(hours=1)))
    with pytest.raises(ValueError, match="has not begun"):
        phase_end_early(phase=one)
    one.refresh_from_db()
    assert one.ends_at > one.starts_at


def test_closing_an_arena_starts_the_next_phase_now_with_its_length():
    competition = plan(-timedelta(hours=2, minutes=30))  # phase 1's arena is open
    other_one, other_two = phases(plan(-timedelta(hours=2, minutes=30), name="other"))
    one, two = phases(competition)
    length = two.ends_at - two.starts_at
    now = timezone.now()
    phase_arena_close_early(phase=one, now=now)
    two.refresh_from_db()
    assert (two.starts_at, two.ends_at) == (now, now + length)
    assert arena_closes_at(one) == now  # phase 1's arena closes as phase 2 starts
    # Another competition's phases stay on their calendar.
    for phase in (other_one, other_two):
        assert Phase.objects.get(pk=phase.pk).starts_at == phase.starts_at


def test_closing_the_last_arena_closes_it_now():
    _, two = phases(plan(-timedelta(hours=5, minutes=30)))  # phase 2's arena is open
    now = timezone.now()
    phase_arena_close_early(phase=two, now=now)
    two.refresh_from_db()
    assert two.arena_closes_at == now
