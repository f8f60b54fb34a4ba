"""Where a contestant's server move lands (arena/phases/serving.py `ContestantEndpoint`): new
battles read the new endpoint, a lost server's contestant is offered to no one, and an old
server counts as busy while a battle that may have read it still streams."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from arena.battles.models import Battle
from arena.phases.serving import ContestantEndpoint
from arena.serving.client import Endpoint
from arena.serving.models import Contestant
from arena.serving.selectors import contestant_endpoint
from tests import factories

pytestmark = pytest.mark.django_db

OLD = Endpoint("http://10.0.0.1:4000/v1", "contestant-old", "old-key")
NEW = Endpoint("http://10.0.0.2:4100/v1", "contestant-new", "new-key")


def served(name: str = "reference-base") -> Contestant:
    return factories.contestant(name, endpoint=OLD)


def generating(contestant: Contestant, *, started: datetime) -> Battle:
    battle = factories.complete_battle(a=contestant, state=Battle.State.GENERATING)
    Battle.objects.filter(pk=battle.pk).update(generation_started_at=started)
    return battle


def test_a_move_points_new_battles_at_the_new_server_and_offers_the_model_again():
    contestant = served()
    Contestant.objects.filter(pk=contestant.pk).update(active=False)  # it was lost meanwhile
    ContestantEndpoint(contestant.pk).move(OLD, NEW)
    contestant.refresh_from_db()
    assert contestant_endpoint(contestant) == NEW
    assert contestant.active


def test_a_lost_server_withdraws_its_contestant_unless_it_was_moved_already():
    contestant, other = served(), served("reference-instruct")
    ContestantEndpoint(contestant.pk).withdraw(OLD)
    assert not Contestant.objects.get(pk=contestant.pk).active
    ContestantEndpoint(other.pk).move(OLD, NEW)
    ContestantEndpoint(other.pk).withdraw(OLD)  # news of the old server, come late
    assert Contestant.objects.get(pk=other.pk).active


def test_an_old_server_is_busy_only_while_a_battle_begun_before_the_move_streams():
    contestant, other = served(), served("reference-instruct")
    moved_at = timezone.now()
    keeper = ContestantEndpoint(contestant.pk)
    assert not keeper.in_flight(OLD, since=moved_at)

    factories.complete_battle(a=contestant)  # answered: streams no more
    generating(other, started=moved_at - timedelta(seconds=30))  # someone else's
    generating(contestant, started=moved_at + timedelta(minutes=1))  # read the new endpoint
    assert not keeper.in_flight(OLD, since=moved_at)

    streaming = generating(contestant, started=moved_at - timedelta(seconds=30))
    assert keeper.in_flight(OLD, since=moved_at)
    Battle.objects.filter(pk=streaming.pk).update(state=Battle.State.COMPLETE)
    assert not keeper.in_flight(OLD, since=moved_at)
