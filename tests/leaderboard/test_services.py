import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from arena.battles.services import vote_record
from arena.leaderboard.models import RatingSnapshot, RefitLease
from arena.leaderboard.services import LIVE_GROUP, leaderboard_refresh
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def vote(a, b, choice="a"):
    battle = factories.complete_battle(a=a, b=b)
    vote_record(battle_id=battle.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip")


def test_nothing_is_fitted_before_the_first_counted_vote():
    assert leaderboard_refresh(holder="test") is None
    assert not RatingSnapshot.objects.exists()


def test_a_new_vote_makes_one_refit_and_no_new_vote_makes_none():
    left, right = factories.contestant("left"), factories.contestant("right")
    vote(left, right)
    first = leaderboard_refresh(holder="test")
    assert first is not None and first.n_battles == 1
    assert leaderboard_refresh(holder="test") is None
    vote(left, right, "b")
    second = leaderboard_refresh(holder="test")
    assert second.n_battles == 2
    assert {s["model"] for s in second.style["scores"]} == {"left", "right"}


def test_while_another_process_holds_the_lease_nothing_is_fitted():
    vote(factories.contestant(), factories.contestant())
    RefitLease.objects.create(
        id=1, held_until=timezone.now() + timezone.timedelta(seconds=30), holder="other"
    )
    assert leaderboard_refresh(holder="test") is None
    RefitLease.objects.filter(id=1).update(
        held_until=timezone.now() - timezone.timedelta(seconds=1)
    )
    assert leaderboard_refresh(holder="test") is not None  # an expired lease is taken over


def test_a_refit_is_pushed_to_live_screens():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(LIVE_GROUP, channel)
    try:
        vote(factories.contestant("left"), factories.contestant("right"))
        leaderboard_refresh(holder="test")
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(LIVE_GROUP, channel)
    assert message["type"] == "leaderboard.update"
    table = message["table"]
    assert table["n_battles"] == 1
    assert [s["model"] for s in table["style"]["scores"]] == ["left", "right"]
