"""What tells the live inputs (live_inputs.py) that votes already read changed after the fact.

The live refit reads only the votes newer than those it holds. Anything that changes a vote
it already holds — the vote edited or deleted, its battle or an answer saved again (a leak,
restyled counts), a contestant renamed (boards rate display names) — bumps
`RefitLease.inputs_generation`, and every process reads all votes again at its next refit.
Saves that bypass signals (`QuerySet.update`, raw SQL) are caught by the live inputs' own
checks: the count of votes in the fit, and a full read at least every
`FULL_READ_SECONDS`.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from arena.battles.models import Answer, Battle, Vote
from arena.leaderboard.models import RefitLease
from arena.serving.models import Contestant


def inputs_generation_bump() -> None:
    """Every process's live inputs read all votes again at their next refit."""
    if not RefitLease.objects.filter(id=1).update(inputs_generation=F("inputs_generation") + 1):
        RefitLease.objects.get_or_create(id=1, defaults={"inputs_generation": 1})


@receiver(post_save, sender=Vote, dispatch_uid="leaderboard-vote-saved")
def _vote_saved(sender: type, instance: Vote, created: bool, **kwargs: Any) -> None:
    if not created:  # a new vote is read as a new vote; an edited one was read before
        inputs_generation_bump()


@receiver(post_delete, sender=Vote, dispatch_uid="leaderboard-vote-deleted")
def _vote_deleted(sender: type, instance: Vote, **kwargs: Any) -> None:
    inputs_generation_bump()


@receiver(post_save, sender=Battle, dispatch_uid="leaderboard-battle-saved")
@receiver(post_save, sender=Answer, dispatch_uid="leaderboard-answer-saved")
def _battle_or_answer_saved(
    sender: type, instance: Battle | Answer, created: bool, **kwargs: Any
) -> None:
    # Battles and answers are saved several times before their vote (one query then); only
    # a save after the vote changes what was fitted.
    battle_id = instance.pk if isinstance(instance, Battle) else instance.battle_id
    if not created and Vote.objects.filter(battle_id=battle_id).exists():
        inputs_generation_bump()


@receiver(post_delete, sender=Answer, dispatch_uid="leaderboard-answer-deleted")
def _answer_deleted(sender: type, instance: Answer, **kwargs: Any) -> None:
    # A battle deleted with its vote bumps through the vote.
    if Vote.objects.filter(battle_id=instance.battle_id).exists():
        inputs_generation_bump()


@receiver(pre_save, sender=Contestant, dispatch_uid="leaderboard-contestant-renaming")
def _contestant_renaming(sender: type, instance: Contestant, **kwargs: Any) -> None:
    if instance.pk is None:
        return
    before = Contestant.objects.filter(pk=instance.pk).values_list("display_name", flat=True)
    instance._leaderboard_renamed = before.first() not in (None, instance.display_name)


@receiver(post_save, sender=Contestant, dispatch_uid="leaderboard-contestant-saved")
def _contestant_saved(sender: type, instance: Contestant, **kwargs: Any) -> None:
    if getattr(instance, "_leaderboard_renamed", False):
        inputs_generation_bump()
