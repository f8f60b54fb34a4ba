from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.utils import timezone

from arena.battles.services import vote_record
from arena.leaderboard import services
from arena.leaderboard.models import RatingSnapshot, RefitLease
from arena.leaderboard.services import (
    LIVE_GROUP,
    LIVE_SNAPSHOTS_KEPT,
    REFIT_MIN_INTERVAL_SECONDS,
    leaderboard_refresh,
    refit_lease_claim,
)
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def vote(a, b, choice="a"):
    battle = factories.complete_battle(a=a, b=b)
    vote_record(battle_id=battle.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip")


def age_live_snapshots(seconds=REFIT_MIN_INTERVAL_SECONDS):
    """As if the live snapshots were made `seconds` earlier."""
    for snapshot in RatingSnapshot.objects.filter(source="live"):
        snapshot.created_at -= timedelta(seconds=seconds)
        snapshot.save(update_fields=["created_at"])


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
    age_live_snapshots()
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


def test_within_the_minimum_interval_no_caller_refits():
    left, right = factories.contestant("left"), factories.contestant("right")
    vote(left, right)
    assert leaderboard_refresh(holder="live") is not None
    vote(left, right, "b")
    assert leaderboard_refresh(holder="page") is None  # a newer vote, but the fit is too young
    assert leaderboard_refresh(holder="live") is None
    age_live_snapshots()
    assert leaderboard_refresh(holder="page").n_battles == 2
    assert RatingSnapshot.objects.count() == 2


def test_a_refit_that_outlived_its_lease_leaves_the_next_holders_lease_alone(monkeypatch):
    vote(factories.contestant(), factories.contestant())
    fit = services.snapshot_unsaved
    taken_over = {}

    def slow_fit(*args, **kwargs):
        # The fit outlives the lease and a caller with the same name takes it over.
        RefitLease.objects.update(held_until=timezone.now() - timedelta(seconds=1))
        taken_over["token"] = refit_lease_claim(holder="page")
        return fit(*args, **kwargs)

    monkeypatch.setattr(services, "snapshot_unsaved", slow_fit)
    assert leaderboard_refresh(holder="page") is not None

    lease = RefitLease.objects.get()
    assert taken_over["token"] is not None and lease.holder == taken_over["token"]
    assert lease.held_until > timezone.now()  # still held by the caller that took it over


def test_the_fit_runs_outside_the_transaction_that_saves_it(monkeypatch):
    vote(factories.contestant(), factories.contestant())
    fit = services.snapshot_unsaved
    in_transaction = []

    def watched_fit(*args, **kwargs):
        in_transaction.append(connection.in_atomic_block)
        return fit(*args, **kwargs)

    monkeypatch.setattr(services, "snapshot_unsaved", watched_fit)
    assert leaderboard_refresh(holder="test") is not None
    assert in_transaction == [False]


def test_only_the_newest_live_snapshots_are_kept():
    long_ago = timezone.now() - timedelta(days=1)
    for source in ["live"] * (LIVE_SNAPSHOTS_KEPT + 5) + ["command", "phase"]:
        snapshot = RatingSnapshot.objects.create(source=source, n_battles=0, raw={})
        snapshot.created_at = long_ago
        snapshot.save(update_fields=["created_at"])
    vote(factories.contestant(), factories.contestant())

    fresh = leaderboard_refresh(holder="test")

    live = RatingSnapshot.objects.filter(source="live")
    assert live.count() == LIVE_SNAPSHOTS_KEPT and live.first() == fresh
    assert RatingSnapshot.objects.filter(source__in=["command", "phase"]).count() == 2
