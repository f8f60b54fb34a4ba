"""Reads of the battles context."""

from __future__ import annotations

import random
from pathlib import Path

from django.db.models import F

from arena.battles.models import Battle, SuggestedPrompt, TargetedRound

DEFAULT_PROMPTS_FILE = Path(__file__).with_name("default_prompts.txt")


def default_prompts() -> list[str]:
    return [line.strip() for line in DEFAULT_PROMPTS_FILE.read_text().splitlines() if line.strip()]


def prompt_suggest(rng: random.Random | None = None) -> str:
    """A random prompt from the pool (the shipped defaults when the pool is empty)."""
    rng = rng or random.SystemRandom()
    targeted = next(
        (
            r
            for r in TargetedRound.objects.filter(
                battles_served__lt=F("battles_wanted"),
                contestant_a__active=True,
                contestant_b__active=True,
            )
            if r.prompts
        ),
        None,
    )
    if targeted is not None:  # an organizer's chosen prompts go first
        return targeted.prompts[targeted.battles_served % len(targeted.prompts)]
    ids = list(SuggestedPrompt.objects.filter(active=True).values_list("pk", flat=True))
    if ids:
        return SuggestedPrompt.objects.get(pk=rng.choice(ids)).text
    return rng.choice(default_prompts())


def battle_for_voter(*, battle_id: str, voter_key: str) -> Battle | None:
    return Battle.objects.filter(pk=battle_id, voter_key=voter_key).first()
