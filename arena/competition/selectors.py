from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Case, IntegerField, Value, When

from arena.competition.models import Competition, Phase
from cluster.backends.base import AccountLimits


def phase_current() -> Phase | None:
    """The phase agents are in now: the running one, else the latest that has begun."""
    running = phase_running()
    if running is not None:
        return running
    return Phase.objects.exclude(state=Phase.State.SCHEDULED).order_by("-starts_at").first()


def phase_in_arena() -> Phase | None:
    """The phase whose nominated models the arena serves now (its battles carry its label)."""
    return Phase.objects.filter(state=Phase.State.SERVING).order_by("-starts_at").first()


def phase_running() -> Phase | None:
    return Phase.objects.filter(state=Phase.State.RUNNING).order_by("-starts_at").first()


def phase_account_limits(phase: Phase) -> AccountLimits:
    """An agent's Slurm limits while `phase` runs."""
    return AccountLimits(
        gpu_hours=float(phase.gpu_hours),
        max_gpus=phase.max_gpus,
        max_preemptible_gpus=phase.max_preemptible_gpus,
        max_job_hours=phase.max_job_hours,
    )


@dataclass(frozen=True)
class ArenaSettings:
    """The arena's settings in force: what the current competition's file declares
    (`Competition.arena_settings`), the rest from settings.py. Each one is read where it
    acts, per battle or vote, so a change takes effect on the next one."""

    max_tokens: int
    temperature: float
    answer_max_chars: int
    generation_timeout_s: float
    stream_chars_per_second: float
    min_vote_seconds: float
    battles_per_minute: int
    battles_per_minute_per_ip: int
    max_turns: int


# A competition file's `[arena]` key -> the Django setting it overrides.
ARENA_SETTING_DEFAULTS = {
    "max_tokens": "ARENA_MAX_TOKENS",
    "temperature": "ARENA_TEMPERATURE",
    "answer_max_chars": "ARENA_ANSWER_MAX_CHARS",
    "generation_timeout_s": "ARENA_GENERATION_TIMEOUT_S",
    "stream_chars_per_second": "ARENA_STREAM_CHARS_PER_SECOND",
    "min_vote_seconds": "ARENA_MIN_VOTE_SECONDS",
    "battles_per_minute": "ARENA_BATTLES_PER_MINUTE",
    "battles_per_minute_per_ip": "ARENA_BATTLES_PER_MINUTE_PER_IP",
    "max_turns": "ARENA_MAX_TURNS",
}


def competition_current() -> Competition | None:
    """The competition the arena and the agents are in now: the one whose phase the arena
    serves, else the one whose phase runs or ran last, else the newest planned.

    The same choice as `phase_in_arena() or phase_current()`, in one query instead of three
    and a fourth for the competition: the arena's settings are read on every battle and vote.
    """
    in_order = Case(
        When(state=Phase.State.SERVING, then=Value(0)),
        When(state=Phase.State.RUNNING, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    phase = (
        Phase.objects.exclude(state=Phase.State.SCHEDULED)
        .select_related("competition")
        .order_by(in_order, "-starts_at")
        .first()
    )
    if phase is not None:
        return phase.competition
    return Competition.objects.order_by("-created_at", "-pk").first()


def arena_settings_current() -> ArenaSettings:
    competition = competition_current()
    declared = competition.arena_settings if competition is not None else {}
    values = {
        key: declared.get(key, getattr(settings, setting))
        for key, setting in ARENA_SETTING_DEFAULTS.items()
    }
    return ArenaSettings(**values)


def phases_in_order() -> list[Phase]:
    """Every phase of every competition, in calendar order, with its competition."""
    return list(Phase.objects.select_related("competition").order_by("starts_at", "number"))


def phase_overlapping(start: dt.datetime, end: dt.datetime) -> Phase | None:
    """The latest-starting phase that overlaps [start, end) (for the daily reports)."""
    return Phase.objects.filter(starts_at__lt=end, ends_at__gt=start).order_by("-starts_at").first()
