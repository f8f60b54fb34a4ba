"""Reads of the battles context."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db.models import Count, F, Q, QuerySet, prefetch_related_objects

from arena.battles.models import (
    Answer,
    AnswerContent,
    Battle,
    SuggestedPrompt,
    TargetedRound,
    Vote,
    VoterExclusion,
)
from arena.serving.models import Contestant

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


@dataclass(frozen=True)
class TurnRecord:
    """One prompt of a battle and both sides' answers to it (none yet while they are being
    written, or when the battle broke before they were stored)."""

    number: int
    prompt: str
    answers: dict[str, AnswerContent]  # side -> what it said


def battle_turns(battle: Battle, answers: list[Answer] | None = None) -> list[TurnRecord]:
    """The battle's prompts in order, each with both sides' answers. `answers`: the battle's
    `Answer` rows if the caller has them. A one-turn battle costs no query for follow-ups;
    prefetched `follow_ups__answers` are used as they are."""
    first = answers if answers is not None else list(battle.answers.all())
    turns = [TurnRecord(1, battle.prompt, {answer.side: answer for answer in first})]
    if battle.turns > 1:
        prefetch_related_objects([battle], "follow_ups__answers")  # two queries, once
        follow_ups = sorted(battle.follow_ups.all(), key=lambda follow_up: follow_up.turn)
        turns.extend(
            TurnRecord(
                follow_up.turn,
                follow_up.prompt,
                {answer.side: answer for answer in follow_up.answers.all()},
            )
            for follow_up in follow_ups
        )
    return turns


def conversation_histories(
    battle: Battle, answers: list[Answer]
) -> dict[str, list[dict[str, str]]]:
    """What each side is sent for the battle's latest prompt (OpenAI messages): every earlier
    prompt followed by that side's own answer to it, then the latest prompt. A side never sees
    the other side's answers."""
    turns = battle_turns(battle, answers)
    histories: dict[str, list[dict[str, str]]] = {answer.side: [] for answer in answers}
    for turn in turns:
        for side, messages in histories.items():
            messages.append({"role": "user", "content": turn.prompt})
            if turn.number < battle.turns:
                messages.append({"role": "assistant", "content": turn.answers[side].text})
    return histories


def battle_for_voter(*, battle_id: str, voter_key: str) -> Battle | None:
    return Battle.objects.filter(pk=battle_id, voter_key=voter_key).first()


@dataclass(frozen=True)
class IdentityWords:
    """What an answer must not say (see arena/battles/identity.py for how each kind matches)."""

    names: list[str]
    configured: list[str]


def identity_words() -> IdentityWords:
    """The names and identity words of every contestant, active or not — an answer naming any
    model in the arena gives something away — plus the configured words.

    With `ARENA_IDENTITY_MATCH_AGENT_NAME`, the name of each agent with a nominee among the
    contestants is a name too: an agent's model saying "I'm alpha" gives it away as surely as
    "I'm alpha-phase-1".

    Read fresh for each battle (one or two queries), so a contestant registered a moment ago
    counts.
    """
    names: set[str] = set()
    configured: set[str] = set(settings.ARENA_IDENTITY_WORDS)
    rows = Contestant.objects.values_list(
        "display_name", "served_model_name", "checkpoint_path", "identity_words"
    )
    for display_name, served_model_name, checkpoint_path, words in rows:
        names.update((display_name, served_model_name, checkpoint_path))
        configured.update(words or [])
    if settings.ARENA_IDENTITY_MATCH_AGENT_NAME:
        names.update(
            Contestant.objects.filter(phase_entries__nomination__isnull=False)
            .values_list("phase_entries__nomination__agent__name", flat=True)
            .distinct()
        )
    return IdentityWords(
        names=sorted(n for n in names if n.strip()),
        configured=sorted(w for w in configured if w.strip()),
    )


@dataclass(frozen=True)
class LeakRate:
    contestant: str
    answered: int  # answers in battles both sides finished (state complete)
    leaked: int  # of those, answers that revealed an identity

    @property
    def rate(self) -> float:
        return self.leaked / self.answered if self.answered else 0.0


def leak_rates() -> list[LeakRate]:
    """Each contestant's leaks over the battles it answered, highest rate first."""
    own_leak = Q(side="a", battle__leaked_sides__contains="a") | Q(
        side="b", battle__leaked_sides__contains="b"
    )
    rows = (
        Answer.objects.filter(battle__state=Battle.State.COMPLETE)
        .values("contestant__display_name")
        .annotate(answered=Count("pk"), leaked=Count("pk", filter=own_leak))
    )
    rates = [LeakRate(r["contestant__display_name"], r["answered"], r["leaked"]) for r in rows]
    return sorted(rates, key=lambda r: (-r.rate, r.contestant))


def exclusions_in_force() -> QuerySet[VoterExclusion]:
    return VoterExclusion.objects.filter(lifted_at__isnull=True).order_by("id")


def votes_in_fit(*, phase: str | None = None) -> QuerySet[Vote]:
    """The votes the leaderboard is fitted on: counted, and cast by no excluded voter. The
    export and the phases' feedback read the same set, so `ratings --votes` on an export
    reproduces the table."""
    votes = Vote.objects.filter(counted=True)
    if phase is not None:
        votes = votes.filter(battle__phase=phase)
    excluded = exclusions_in_force()
    sessions = excluded.filter(kind=VoterExclusion.Kind.SESSION).values("key")
    networks = excluded.filter(kind=VoterExclusion.Kind.NETWORK).values("key")
    return votes.exclude(voter_key__in=sessions).exclude(ip_hash__in=networks)


def exclusions_summary(*, phase: str | None = None) -> dict[str, object]:
    """What a fit publishes about the exclusions in force: how many votes they leave out (of
    one phase's battles, if given), and each one's id, kind, date and reason — never the voter's
    hash."""
    counted = Vote.objects.filter(counted=True)
    if phase is not None:
        counted = counted.filter(battle__phase=phase)
    in_force = []
    for exclusion in exclusions_in_force():
        field = "voter_key" if exclusion.kind == VoterExclusion.Kind.SESSION else "ip_hash"
        in_force.append(
            {
                "id": exclusion.pk,
                "kind": exclusion.kind,
                "since": exclusion.created_at.isoformat(),
                "reason": exclusion.reason,
                "votes": counted.filter(**{field: exclusion.key}).count(),
            }
        )
    if not in_force:  # nothing excluded: spare the two counts (a million votes each, live)
        return {"votes_excluded": 0, "in_force": []}
    return {
        "votes_excluded": counted.count() - votes_in_fit(phase=phase).count(),
        "in_force": in_force,
    }


def voter_exclusions_latest(*, limit: int) -> list[VoterExclusion]:
    """The newest exclusions first, lifted ones included (the organizer's voters page)."""
    return list(VoterExclusion.objects.order_by("-id")[:limit])
