"""Fit the leaderboard and keep the live one fresh."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from arena.battles.categories import CATEGORIES
from arena.battles.models import VoterExclusion
from arena.battles.prompt_groups import dedup_weights
from arena.battles.selectors import exclusions_in_force, exclusions_summary, votes_in_fit
from arena.battles.services import voter_exclude, voter_key_resolve
from arena.leaderboard.inputs import counted_battles_grouped, votes_in_category
from arena.leaderboard.live_inputs import live_battles
from arena.leaderboard.models import RatingSnapshot, RefitLease
from arena.leaderboard.screening import voter_screening
from arena.rating import Battles, RatingResult, fit_ratings, longer_answer_wins
from arena.rating.fit import CiMethod

log = logging.getLogger(__name__)

LIVE_GROUP = "leaderboard.live"  # every open live-leaderboard screen
LEASE_SECONDS = 60
# However many callers ask (live loops in several processes, page views), the live
# leaderboard is refitted at most once per interval: a vote still reaches screens within a
# second, and a burst of votes or page views costs one fit a second.
REFIT_MIN_INTERVAL_SECONDS = 1.0
LIVE_SNAPSHOTS_KEPT = 50  # older live snapshots are deleted: one is made every second of voting


def result_table(result: RatingResult) -> dict[str, Any]:
    """What screens and the JSON endpoint show of one fit."""
    table = result.to_json()
    table["models"] = result.models
    table["win_probability"] = np.round(result.win_probability, 4).tolist()
    if result.superiority is not None:
        table["superiority"] = np.round(result.superiority, 4).tolist()
    return table


def analyses_of(battles: Battles) -> dict[str, Any]:
    """Votes per model and per pair, observed pairwise win rates, the longer-answer share."""
    m = battles.n_models
    # One bincount per table over the flat (row, column) index: a pass over the battles in C,
    # where np.add.at takes a quarter of a second at a million.
    a_then_b = battles.a * m + battles.b
    b_then_a = battles.b * m + battles.a
    wins = np.bincount(
        a_then_b, weights=battles.outcome * battles.weight, minlength=m * m
    ) + np.bincount(b_then_a, weights=(1 - battles.outcome) * battles.weight, minlength=m * m)
    wins = wins.reshape(m, m)
    games = np.bincount(a_then_b, weights=battles.weight, minlength=m * m).reshape(m, m)
    games = games + games.T
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(games > 0, wins / games, np.nan)
    analyses: dict[str, Any] = {
        "models": battles.models,
        "votes_per_model": dict(
            zip(battles.models, games.sum(axis=1).astype(int).tolist(), strict=True)
        ),
        "pair_battles": games.astype(int).tolist(),
        "pair_win_rate": [
            [None if np.isnan(x) else round(float(x), 4) for x in row] for row in rate
        ],
    }
    if battles.style is not None:
        effect = longer_answer_wins(battles)
        analyses["longer_answer_wins"] = {
            "decisive_votes_with_length_difference": effect.decisive_with_length_difference,
            "won_by_longer": effect.won_by_longer,
            "share": effect.share,
        }
    return analyses


def snapshot_unsaved(
    battles: Battles,
    *,
    source: str,
    ci: CiMethod,
    style: bool = True,
    bootstrap_rounds: int = 100,
    seed: int = 0,
    last_vote_at: Any = None,
    warm_start: dict[str, Any] | None = None,
    phase: str = "",
    category: str = "",
    exclusions: dict[str, Any] | None = None,
    groups: np.ndarray | None = None,
    groups_from: str = "database",
) -> tuple[RatingSnapshot, RatingResult | None, RatingResult]:
    """Fit style-controlled (when asked) and raw ratings into a snapshot not yet saved, so
    the fit — the slow part — runs outside any transaction. `exclusions` is what the snapshot
    publishes about excluded voters (`exclusions_summary`); battles from a file have none.
    `groups` (one prompt group per battle) down-weights near-duplicate prompts in the fit
    (`prompt_groups.group_weights`); the analyses count every battle as one."""
    warm = warm_start if warm_start and warm_start.get("models") == battles.models else {}
    counted = battles
    dedup: dict[str, Any] = {}
    if groups is not None:
        weights, dedup = dedup_weights(groups, groups_from)
        battles = battles.reweighted(weights)

    def start(kind: str) -> np.ndarray | None:
        return np.asarray(warm[kind]) if kind in warm else None

    options: dict[str, Any] = {"ci": ci, "bootstrap_rounds": bootstrap_rounds, "seed": seed}
    styled = (
        fit_ratings(battles, style=True, warm_start=start("style"), **options) if style else None
    )
    # Without style, one weighted row per (A, B, outcome) is the same fit (see
    # `Battles.aggregated`) in milliseconds at any size; a bootstrap resamples rows, so it
    # keeps them.
    raw_battles = battles.aggregated() if ci != "bootstrap" else battles.without_style()
    raw = fit_ratings(raw_battles, style=False, warm_start=start("raw"), **options)
    snapshot = RatingSnapshot(
        source=source,
        phase=phase,
        category=category,
        n_battles=battles.n_rows,
        last_vote_at=last_vote_at,
        ci_method=ci,
        style=result_table(styled) if styled else None,
        raw=result_table(raw),
        analyses=analyses_of(counted),
        exclusions=exclusions or {},
        dedup=dedup,
        warm_start={
            "models": battles.models,
            "raw": raw.theta.tolist(),
            **({"style": styled.theta.tolist()} if styled else {}),
        },
    )
    return snapshot, styled, raw


def snapshot_fit(
    battles: Battles, **options: Any
) -> tuple[RatingSnapshot, RatingResult | None, RatingResult]:
    """Fit as `snapshot_unsaved` does and save the snapshot."""
    snapshot, styled, raw = snapshot_unsaved(battles, **options)
    snapshot.save()
    return snapshot, styled, raw


def live_payload(snapshot: RatingSnapshot | None) -> dict[str, Any]:
    """The message a live screen renders (no big matrices: it is pushed on every refit)."""
    if snapshot is None:
        return {"n_battles": 0, "computed_at": None, "style": None, "raw": None}

    def slim(table: dict[str, Any] | None) -> dict[str, Any] | None:
        if table is None:
            return None
        keep = (
            "method",
            "ci",
            "confidence",
            "n_battles",
            "scores",
            "style_coefficients",
            "warnings",
        )
        return {k: table.get(k) for k in keep}

    longer = snapshot.analyses.get("longer_answer_wins") or {}
    return {
        "n_battles": snapshot.n_battles,
        "votes_excluded": snapshot.exclusions.get("votes_excluded", 0),
        "computed_at": snapshot.created_at.isoformat(),
        "style": slim(snapshot.style),
        "raw": slim(snapshot.raw),
        "longer_answer_share": longer.get("share"),
    }


def leaderboard_refresh(*, holder: str) -> RatingSnapshot | None:
    """Refit the live leaderboard if a counted vote arrived since the last live snapshot and
    that snapshot is at least `REFIT_MIN_INTERVAL_SECONDS` old; None when nothing was fitted.

    Safe to call from any number of processes and requests: one caller at a time holds the
    lease (a conditional UPDATE on a single row); the others return None. `holder` names the
    caller in the lease for people reading it. The new table is pushed to every live screen
    after the snapshot commits.
    """
    seen = _live_snapshot_latest()
    if not _live_refit_due(seen):
        return None
    token = refit_lease_claim(holder=holder)
    if token is None:
        return None
    try:
        latest = _live_snapshot_latest()  # again: another caller may have refitted meanwhile
        if (latest and latest.pk) != (seen and seen.pk) and not _live_refit_due(latest):
            return None
        exclusions = exclusions_summary()
        live = live_battles()  # only the votes since the last refit, where that is safe
        if live is None:
            return None
        snapshot, _, _ = snapshot_unsaved(
            live.battles,
            groups=live.groups,
            exclusions=exclusions,
            source=RatingSnapshot.Source.LIVE,
            ci="sandwich",  # one fit, milliseconds: fast enough to refit every second
            last_vote_at=live.last_vote_at,
            warm_start=latest.warm_start if latest else None,
        )
        with transaction.atomic():
            snapshot.save()
            _live_snapshots_prune()
            payload = live_payload(snapshot)
            transaction.on_commit(lambda: _push(payload))
        return snapshot
    finally:
        refit_lease_release(token=token)


def refit_lease_claim(*, holder: str) -> str | None:
    """Take the refit lease unless someone holds it unexpired. Returns the token that
    releases it — unique to this claim, so a caller whose lease ran out never releases the
    next holder's — or None."""
    token = f"{holder[:60]}:{uuid.uuid4().hex}"
    now = timezone.now()
    RefitLease.objects.get_or_create(id=1)
    claimed = (
        RefitLease.objects.filter(id=1)
        .exclude(held_until__gt=now)
        .update(held_until=now + timedelta(seconds=LEASE_SECONDS), holder=token)
    )
    return token if claimed else None


def refit_lease_release(*, token: str) -> None:
    RefitLease.objects.filter(id=1, holder=token).update(held_until=None)


def _live_snapshot_latest() -> RatingSnapshot | None:
    return RatingSnapshot.objects.filter(source=RatingSnapshot.Source.LIVE, category="").first()


def _live_refit_due(latest: RatingSnapshot | None) -> bool:
    """`latest` is old enough to replace, and a vote in the fit is missing from it or the
    exclusions in force changed since (an organizer excluded or restored a voter)."""
    if latest is not None and timezone.now() - latest.created_at < timedelta(
        seconds=REFIT_MIN_INTERVAL_SECONDS
    ):
        return False
    watermark = votes_in_fit().aggregate(n=Count("pk"), last=Max("created_at"))
    if watermark["n"] == 0:
        return False
    if latest is None:
        return True
    excluded_ids = list(exclusions_in_force().values_list("pk", flat=True))
    fitted_ids = [e["id"] for e in latest.exclusions.get("in_force", [])]
    return (
        latest.n_battles != watermark["n"]
        or latest.last_vote_at != watermark["last"]
        or fitted_ids != excluded_ids
    )


def _live_snapshots_prune() -> None:
    live = RatingSnapshot.objects.filter(source=RatingSnapshot.Source.LIVE, category="")
    kept = list(
        live.order_by("-created_at", "-id").values_list("pk", flat=True)[:LIVE_SNAPSHOTS_KEPT]
    )
    live.exclude(pk__in=kept).delete()


def phase_leaderboard_fit(
    *, phase: str, bootstrap_rounds: int = 200, seed: int = 0
) -> RatingSnapshot | None:
    """Fit one phase's counted votes with bootstrap intervals and save the snapshot (None: the
    phase has no counted votes yet). What organizers publish and agents receive as feedback."""
    exclusions = exclusions_summary(phase=phase)
    battles, groups, last_vote_at = counted_battles_grouped(phase=phase)
    if battles is None:
        return None
    snapshot, _, _ = snapshot_fit(
        battles,
        groups=groups,
        exclusions=exclusions,
        source=RatingSnapshot.Source.PHASE,
        ci="bootstrap",
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        last_vote_at=last_vote_at,
        phase=phase,
    )
    return snapshot


class CategoryUnknown(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown category {name!r}: one of {', '.join(CATEGORIES)}")
        self.name = name


class CategoryTooSmall(Exception):
    """Too few battles in a category for a table worth showing."""

    def __init__(self, category: str, n_battles: int, minimum: int) -> None:
        super().__init__(
            f"the {category} category has {n_battles} counted "
            f"battle{'' if n_battles == 1 else 's'}; a table needs at least {minimum}"
        )
        self.category = category
        self.n_battles = n_battles
        self.minimum = minimum


def category_check(name: str) -> str:
    """`name` if it is a category, else CategoryUnknown (a usage error for every caller)."""
    if name not in CATEGORIES:
        raise CategoryUnknown(name)
    return name


def category_minimum() -> int:
    return settings.ARENA_CATEGORY_MIN_BATTLES


# In a category snapshot's `dedup`: the newest `Battle.categorized_at` of its battles when fitted.
CATEGORIZED_THROUGH = "categorized_through"


class CategoryBeingComputed(Exception):
    """Another request is fitting this category's first table right now: try again shortly."""

    def __init__(self, category: str) -> None:
        super().__init__(
            f"the {category} table is being computed; please try again in a few seconds"
        )
        self.category = category


def category_leaderboard(*, category: str, phase: str = "") -> RatingSnapshot:
    """The table of one category's battles (of one phase's, if given): the newest such
    snapshot when no vote in the category arrived since and no battle was categorized again
    (`Battle.categorized_at`), or when it is younger than
    `ARENA_CATEGORY_REFIT_MIN_SECONDS`; else a new fit, saved. Every counted vote is read; the
    public board's rules apply (exclusions, leaks, down-weighted near duplicates). A phase's
    table has bootstrap intervals, as the phase's published one; the site-wide one sandwich
    intervals, as the live board.

    Public pages call this on every view, so fits are single-flight: one caller at a time
    fits a given (category, phase) — a try-lock, never a wait — and the others get the stored
    table however stale, or CategoryBeingComputed when there is none yet.
    Raises CategoryUnknown, or CategoryTooSmall under `ARENA_CATEGORY_MIN_BATTLES` battles."""
    category_check(category)
    watermark = votes_in_category(phase=phase or None, category=category).aggregate(
        n=Count("pk"), last=Max("created_at"), categorized=Max("battle__categorized_at")
    )
    minimum = category_minimum()
    if watermark["n"] < minimum:
        raise CategoryTooSmall(category, watermark["n"], minimum)
    source = RatingSnapshot.Source.PHASE if phase else RatingSnapshot.Source.LIVE
    cached = _category_snapshot(source, phase, category)
    if _category_snapshot_current(cached, watermark):
        return cached  # type: ignore[return-value]
    with _category_refit_lock(category=category, phase=phase) as held:
        if not held:
            if cached is None:
                raise CategoryBeingComputed(category)
            return cached
        cached = _category_snapshot(source, phase, category)  # another caller may have fitted
        if _category_snapshot_current(cached, watermark):
            return cached  # type: ignore[return-value]
        exclusions = exclusions_summary(phase=phase or None)
        battles, groups, last_vote_at = counted_battles_grouped(
            phase=phase or None, category=category
        )
        if battles is None:  # the votes went away between the two reads
            raise CategoryTooSmall(category, 0, minimum)
        snapshot, _, _ = snapshot_unsaved(
            battles,
            groups=groups,
            exclusions=exclusions,
            source=source,
            ci="bootstrap" if phase else "sandwich",
            bootstrap_rounds=200,
            last_vote_at=last_vote_at,
            warm_start=cached.warm_start if cached else None,
            phase=phase,
            category=category,
        )
        # The categorisation generation it was fitted at, read before the fit (a concurrent
        # `battles categorize` then makes the next view refit, never a stale table look new).
        snapshot.dedup = {**snapshot.dedup, CATEGORIZED_THROUGH: _generation(watermark)}
        with transaction.atomic():
            snapshot.save()
            # One table per category and phase is enough: older ones are replaced.
            RatingSnapshot.objects.filter(source=source, phase=phase, category=category).exclude(
                pk=snapshot.pk
            ).delete()
        return snapshot


def _category_snapshot(source: str, phase: str, category: str) -> RatingSnapshot | None:
    return RatingSnapshot.objects.filter(source=source, phase=phase, category=category).first()


def _generation(watermark: dict[str, Any]) -> str | None:
    categorized = watermark["categorized"]
    return categorized.isoformat() if categorized is not None else None


def _category_snapshot_current(cached: RatingSnapshot | None, watermark: dict[str, Any]) -> bool:
    """Whether the stored table may be shown: fitted at the battles' current categorisation
    generation (else it is stale however young: `battles categorize` changed tags or groups),
    and either no vote arrived since or it is younger than the minimum interval."""
    if cached is None or cached.dedup.get(CATEGORIZED_THROUGH) != _generation(watermark):
        return False
    unchanged = cached.n_battles == watermark["n"] and cached.last_vote_at == watermark["last"]
    young = timezone.now() - cached.created_at < timedelta(
        seconds=settings.ARENA_CATEGORY_REFIT_MIN_SECONDS
    )
    return unchanged or young


@contextlib.contextmanager
def _category_refit_lock(*, category: str, phase: str) -> Iterator[bool]:
    """Yields whether this caller holds the refit of (category, phase). PostgreSQL: a
    session advisory lock, tried once and released on exit (or when the connection ends, if
    the process dies mid-fit). Other databases (SQLite in development: one process) always
    hold it."""
    if connection.vendor != "postgresql":
        yield True
        return
    name = f"category-refit:{category}:{phase}".encode()
    key = int.from_bytes(hashlib.sha256(name).digest()[:8], "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def _push(payload: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            LIVE_GROUP, {"type": "leaderboard.update", "table": payload}
        )
    except Exception:
        log.exception("could not push the leaderboard to live screens")


def voter_exclude_on_screening(
    *, kind: str, key: str, reason: str, excluded_by: str
) -> tuple[VoterExclusion, bool]:
    """Exclude a voter (a hash or its prefix) with what screening holds against it as the
    evidence on record; the bool says whether screening had flagged it at all."""
    full_key = voter_key_resolve(kind=kind, key=key)
    flag = next((f for f in voter_screening() if (f.kind, f.key) == (kind, full_key)), None)
    exclusion = voter_exclude(
        kind=kind,
        key=full_key,
        reason=reason,
        excluded_by=excluded_by,
        evidence=flag.evidence if flag else {"flagged": False},
    )
    return exclusion, flag is not None
