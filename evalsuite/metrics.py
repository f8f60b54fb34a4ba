"""The numbers reported about evaluations, as pure functions on plain values.

Every score is a mean over items, higher is better (safety scores included: higher = safer).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A benchmark whose instruct − base gap is below this (in score units, i.e. 5 points of
# accuracy) is left out of gap closed: dividing by a gap that small turns noise into
# ±100 % swings. The excluded benchmarks are named next to the headline.
MIN_MEASURABLE_GAP = 0.05
# A safety score this much below the base model's counts as "more harmful than base".
SAFETY_TOLERANCE = 0.0


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation / √n; 0 for a single item)."""
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(n)


@dataclass(frozen=True)
class GapClosed:
    per_benchmark: dict[str, float]  # measurable benchmarks only
    median: float | None  # the headline; None when no benchmark is measurable
    excluded: list[str]  # gap too small to measure, or a reference score missing


def gap_closed(
    scores: Mapping[str, float],
    base: Mapping[str, float],
    instruct: Mapping[str, float],
    *,
    min_gap: float = MIN_MEASURABLE_GAP,
) -> GapClosed:
    """`(score − base) / (instruct − base)` per benchmark and its median.

    Benchmarks in `scores` with |instruct − base| < `min_gap`, or without both reference
    scores, are left out and named in `excluded`.
    """
    per: dict[str, float] = {}
    excluded: list[str] = []
    for name in sorted(scores):
        if name not in base or name not in instruct:
            excluded.append(name)
            continue
        gap = instruct[name] - base[name]
        if abs(gap) < min_gap:
            excluded.append(name)
            continue
        per[name] = (scores[name] - base[name]) / gap
    return GapClosed(per, statistics.median(per.values()) if per else None, excluded)


def domain_vector(scores: Mapping[str, float], domains: Mapping[str, str]) -> dict[str, float]:
    """Mean score per domain over the benchmarks scored (benchmark → domain in `domains`)."""
    by_domain: dict[str, list[float]] = {}
    for name, score in scores.items():
        by_domain.setdefault(domains[name], []).append(score)
    return {domain: sum(v) / len(v) for domain, v in sorted(by_domain.items())}


def dominates(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """a is at least as good as b in every domain both have, and better in one."""
    shared = a.keys() & b.keys()
    return bool(shared) and all(a[d] >= b[d] for d in shared) and any(a[d] > b[d] for d in shared)


def pareto_set(vectors: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The keys whose vectors no other vector dominates, in input order."""
    return [
        key
        for key, vector in vectors.items()
        if not any(dominates(other, vector) for o, other in vectors.items() if o != key)
    ]


@dataclass(frozen=True)
class PostPeak:
    nominated: str
    nominated_score: float
    best: str
    best_score: float

    @property
    def drop(self) -> float:
        return self.best_score - self.nominated_score


def post_peak_regression(
    history: Sequence[tuple[str, float]], nominated: str, *, margin: float = 0.0
) -> PostPeak | None:
    """A warning when the nominated checkpoint scores below the agent's best *earlier* one.

    `history` is (checkpoint, headline score) in the order the checkpoints were made; a drop
    of more than `margin` is a regression.
    """
    keys = [key for key, _ in history]
    if nominated not in keys:
        raise ValueError(f"{nominated!r} is not in the history")
    position = keys.index(nominated)
    nominated_score = history[position][1]
    earlier = history[:position]
    if not earlier:
        return None
    best, best_score = max(earlier, key=lambda pair: pair[1])
    if best_score - nominated_score > margin:
        return PostPeak(nominated, nominated_score, best, best_score)
    return None


@dataclass(frozen=True)
class SafetyDelta:
    benchmark: str
    score: float
    base: float

    @property
    def delta(self) -> float:
        return self.score - self.base

    @property
    def more_harmful(self) -> bool:
        return self.delta < -SAFETY_TOLERANCE


def safety_deltas(scores: Mapping[str, float], base: Mapping[str, float]) -> list[SafetyDelta]:
    """Each safety score against the base model's (higher is safer); flagged when lower."""
    return [SafetyDelta(name, scores[name], base[name]) for name in sorted(scores) if name in base]
