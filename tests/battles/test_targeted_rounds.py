"""Targeted rounds: an organizer's N battles between a chosen pair come before random pairs,
fill exactly, and are tagged in the export."""

from __future__ import annotations

import random

import pytest
from django.core.management import CommandError, call_command

from arena.battles.export import battle_export_rows
from arena.battles.models import TargetedRound
from arena.battles.selectors import prompt_suggest
from arena.battles.services import battle_create, targeted_round_schedule, vote_record
from tests import factories

pytestmark = pytest.mark.django_db


def start(prompt="Tell me a story.", voter="v"):
    return battle_create(prompt=prompt, voter_key=factories.voter_key(voter), ip_hash=voter)


def pair_of(battle):
    return {answer.contestant.display_name for answer in battle.answers.all()}


def test_targeted_battles_come_first_then_the_arena_draws_random_pairs_again():
    ann, bob, cat, dan = (factories.contestant(n) for n in ("ann", "bob", "cat", "dan"))
    scheduled = targeted_round_schedule(contestant_a=cat, contestant_b=dan, battles=3)

    battles = [start(voter=f"v{i}") for i in range(3)]
    assert all(pair_of(b) == {"cat", "dan"} for b in battles)
    assert all(b.targeted_round == scheduled for b in battles)
    scheduled.refresh_from_db()
    assert scheduled.battles_served == 3

    rng = random.Random(0)
    later = [
        battle_create(prompt="Hi", voter_key=f"w{i}", ip_hash=f"w{i}", rng=rng) for i in range(12)
    ]
    assert all(b.targeted_round is None for b in later)
    assert any(pair_of(b) != {"cat", "dan"} for b in later)


def test_targeted_battles_carry_their_round_in_the_export():
    ann, bob = factories.contestant("ann"), factories.contestant("bob")
    scheduled = targeted_round_schedule(contestant_a=ann, contestant_b=bob, battles=1)
    targeted = start()
    untargeted = factories.complete_battle(a=ann, b=bob)
    targeted.state, targeted.completed_at = "complete", untargeted.completed_at
    targeted.save()
    for battle in (targeted, untargeted):
        vote_record(battle_id=battle.pk, choice="a", voter_key=battle.voter_key, ip_hash="ip")
    rows = {row["battle_id"]: row for row in battle_export_rows()}
    assert rows[targeted.pk]["targeted_round"] == scheduled.pk
    assert rows[untargeted.pk]["targeted_round"] is None


def test_a_round_on_chosen_prompts_is_suggested_first_and_takes_only_those_prompts():
    ann, bob, cat = (factories.contestant(n) for n in ("ann", "bob", "cat"))
    scheduled = targeted_round_schedule(
        contestant_a=ann, contestant_b=bob, battles=2, prompts=["Why is the sky blue?"]
    )
    assert prompt_suggest() == "Why is the sky blue?"
    other = start(prompt="Something else entirely.")
    assert other.targeted_round is None
    chosen = start(prompt="Why is the sky blue?", voter="v2")
    assert chosen.targeted_round == scheduled and pair_of(chosen) == {"ann", "bob"}


def test_a_round_needs_two_contestants_and_a_positive_count():
    ann = factories.contestant("ann")
    bob = factories.contestant("bob")
    with pytest.raises(ValueError, match="two different contestants"):
        targeted_round_schedule(contestant_a=ann, contestant_b=ann, battles=1)
    with pytest.raises(ValueError, match="at least one battle"):
        targeted_round_schedule(contestant_a=ann, contestant_b=bob, battles=0)
    with pytest.raises(CommandError, match="no contestant named 'zed'"):
        call_command("battles", "target", "ann", "zed", "--battles", "2")
    assert TargetedRound.objects.count() == 0
    call_command("battles", "target", "ann", "bob", "--battles", "2")
    assert TargetedRound.objects.get().battles_wanted == 2
