import random
from collections import Counter

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from arena.battles.models import Battle, Vote
from arena.battles.services import (
    VOTES_GROUP,
    BattleRefused,
    battle_create,
    pick_contestants,
    vote_record,
)
from tests import factories

pytestmark = pytest.mark.django_db


def start(prompt="Hi there", voter="voter-1"):
    return battle_create(prompt=prompt, voter_key=factories.voter_key(voter), ip_hash="ip-1")


class TestStartingABattle:
    def test_pairs_two_different_active_contestants_on_random_sides(self):
        factories.contestant("one")
        factories.contestant("two")
        factories.contestant("off", active=False)
        battle = start()
        names = {a.side: a.contestant.display_name for a in battle.answers.all()}
        assert set(names) == {"a", "b"}
        assert names["a"] != names["b"]
        assert "off" not in names.values()
        assert battle.state == Battle.State.CREATED

    def test_battle_ids_are_opaque_and_unguessable(self):
        factories.contestant()
        factories.contestant()
        ids = {start().pk for _ in range(5)}
        assert len(ids) == 5
        assert all(len(i) >= 20 and not i.isdigit() for i in ids)

    def test_needs_two_contestants(self):
        factories.contestant("lonely")
        with pytest.raises(BattleRefused) as refused:
            start()
        assert refused.value.status == 503

    @pytest.mark.parametrize("prompt", ["", "   \n "])
    def test_an_empty_prompt_is_refused(self, prompt):
        with pytest.raises(BattleRefused, match="type a prompt"):
            start(prompt)

    def test_a_long_prompt_is_refused_with_its_length_and_the_limit(self, settings):
        settings.ARENA_PROMPT_MAX_CHARS = 10
        with pytest.raises(BattleRefused, match="11 characters long; the limit is 10"):
            start("x" * 11)

    def test_a_voter_starting_too_many_battles_is_slowed_down(self, settings):
        settings.ARENA_BATTLES_PER_MINUTE = 3
        factories.contestant()
        factories.contestant()
        for _ in range(3):
            start()
        with pytest.raises(BattleRefused) as refused:
            start()
        assert refused.value.status == 429
        start(voter="someone-else")  # others are not affected

    def test_one_network_starting_too_many_battles_is_slowed_down(self, settings):
        settings.ARENA_BATTLES_PER_MINUTE_PER_IP = 2
        factories.contestant()
        factories.contestant()
        start(voter="v1")
        start(voter="v2")
        with pytest.raises(BattleRefused, match="your network"):
            start(voter="v3")


class TestSampling:
    def test_contestants_are_drawn_by_weight_and_never_against_themselves(self):
        heavy = factories.contestant("heavy", weight=6)
        light = factories.contestant("light", weight=1)
        other = factories.contestant("other", weight=1)
        never = factories.contestant("never", weight=0)
        rng = random.Random(7)
        appearances = Counter()
        sides = Counter()
        for _ in range(4000):
            a, b = pick_contestants([heavy, light, other, never], rng)
            assert a.pk != b.pk
            appearances.update([a.display_name, b.display_name])
            sides[a.display_name] += 1
        assert appearances["never"] == 0
        assert appearances["heavy"] > 1.5 * appearances["light"]
        # Sides are random: the heavy model is on the left about half of the time.
        assert 0.4 < sides["heavy"] / appearances["heavy"] < 0.6


class TestVoting:
    def test_a_vote_is_recorded_and_reveals_both_models(self):
        battle = factories.complete_battle(
            a=factories.contestant("left"), b=factories.contestant("right")
        )
        outcome = vote_record(
            battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip"
        )
        assert outcome.counted is True
        assert outcome.reveal == {"a": "left", "b": "right"}
        assert Vote.objects.get(battle=battle).choice == "a"

    def test_a_vote_costs_the_database_a_few_statements(self, django_assert_num_queries):
        # The busiest path of a conference day: the battle (locked, against a follow-up sent
        # at the same moment) with its vote and answers in one query, the arena's settings
        # (two here: no phase has begun, so the newest competition is read), the insert. As
        # the test runs in a transaction, the lock's transaction and the insert's each count a
        # SAVEPOINT and a RELEASE here; in production the first is the request's BEGIN/COMMIT.
        battle = factories.complete_battle()
        with django_assert_num_queries(8):
            vote_record(
                battle_id=battle.pk, choice="b", voter_key=factories.voter_key(), ip_hash="ip"
            )
        with django_assert_num_queries(3):  # a retry reads the recorded vote
            again = vote_record(
                battle_id=battle.pk, choice="b", voter_key=factories.voter_key(), ip_hash="ip"
            )
        assert again.choice == "b" and again.reveal

    def test_a_retried_vote_gets_the_same_answer_not_a_second_vote(self):
        battle = factories.complete_battle()
        first = vote_record(
            battle_id=battle.pk, choice="tie", voter_key=factories.voter_key(), ip_hash="ip"
        )
        again = vote_record(
            battle_id=battle.pk, choice="tie", voter_key=factories.voter_key(), ip_hash="ip"
        )
        assert first == again
        assert Vote.objects.count() == 1

    def test_a_different_second_vote_is_refused(self):
        battle = factories.complete_battle()
        vote_record(battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip")
        with pytest.raises(BattleRefused) as refused:
            vote_record(
                battle_id=battle.pk, choice="b", voter_key=factories.voter_key(), ip_hash="ip"
            )
        assert refused.value.status == 409
        assert Vote.objects.get(battle=battle).choice == "a"

    def test_only_the_battles_own_voter_can_vote(self):
        battle = factories.complete_battle(voter="owner")
        with pytest.raises(BattleRefused) as refused:
            vote_record(
                battle_id=battle.pk,
                choice="a",
                voter_key=factories.voter_key("intruder"),
                ip_hash="ip",
            )
        assert refused.value.status == 403
        assert not Vote.objects.exists()

    def test_a_vote_before_both_answers_are_complete_is_refused(self):
        battle = factories.complete_battle(state=Battle.State.GENERATING)
        with pytest.raises(BattleRefused, match="both answers are complete"):
            vote_record(
                battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip"
            )

    def test_a_vote_faster_than_anyone_can_read_is_refused(self, settings):
        settings.ARENA_MIN_VOTE_SECONDS = 5
        battle = factories.complete_battle(seconds_ago=1)
        with pytest.raises(BattleRefused) as refused:
            vote_record(
                battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip"
            )
        assert refused.value.code == "too_early"

    def test_a_failed_battle_cannot_be_voted_on(self):
        battle = factories.complete_battle(state=Battle.State.FAILED)
        with pytest.raises(BattleRefused, match="failed to answer"):
            vote_record(
                battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip"
            )

    def test_a_void_battle_takes_the_vote_but_does_not_count_it(self):
        battle = factories.complete_battle(void_reason="answer A revealed a model identity")
        outcome = vote_record(
            battle_id=battle.pk, choice="b", voter_key=factories.voter_key(), ip_hash="ip"
        )
        assert outcome.counted is False
        assert Vote.objects.get(battle=battle).counted is False

    @pytest.mark.parametrize("choice", ["", "A", "model_a", "both"])
    def test_unknown_choices_are_refused(self, choice):
        battle = factories.complete_battle()
        with pytest.raises(BattleRefused, match="Unknown vote"):
            vote_record(
                battle_id=battle.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip"
            )


@pytest.mark.django_db(transaction=True)
def test_a_committed_vote_is_announced_on_the_channel_layer():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(VOTES_GROUP, channel)
    try:
        battle = factories.complete_battle()
        vote_record(battle_id=battle.pk, choice="a", voter_key=factories.voter_key(), ip_hash="ip")
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(VOTES_GROUP, channel)
    assert message == {"type": "vote.recorded", "battle": battle.pk, "counted": True}
