"""The numbers reported about evaluations, as pure functions on plain values.

Every score is a mean over items, higher is better (safety scores included: higher = safer),
and carries its standard error and item count (`Score`). Every comparison the reports make
(gap closed's references, safety against base, post-peak drops, Pareto dominance) asks the same
question: is the difference larger than its own noise? `measurable` decides it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# Two independent means differ measurably when |a − b| > z·√(se_a² + se_b²). z = 1.96 is the
# two-sided 5 % level: the 95 % interval of the difference excludes zero, the same confidence as
# the bootstrap intervals of the ratings and correlations shown next to these numbers. A smaller
# z (e.g. 1, "larger than one standard error") would flag a third of pure-noise gaps.
MEASURABLE_Z = 1.96
# The headline's standard error is estimated by redrawing each benchmark score from its own
# normal (mean, se); this many draws, seeded so a report is reproducible.
HEADLINE_DRAWS = 2000


@dataclass(frozen=True)
class Score:
    """A benchmark score: the mean over `n` items and its standard error (None: unknown)."""

    value: float
    stderr: float | None
    n: int

    @property
    def known_stderr(self) -> float | None:
        """The standard error, or None when it cannot be trusted: unknown, or from fewer than
        two items (a single item has no spread to estimate)."""
        return None if self.stderr is None or self.n < 2 else self.stderr


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error: sample standard deviation (n − 1) / √n, 0 for a single
    item. The same quantity as inspect_ai's `stderr()` metric (unclustered)."""
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, statistics.stdev(values) / math.sqrt(n)


def difference_stderr(a: Score, b: Score) -> float | None:
    """Standard error of a − b for two independent means; None if either one is unknown."""
    if a.known_stderr is None or b.known_stderr is None:
        return None
    return math.hypot(a.known_stderr, b.known_stderr)


def measurable(a: Score, b: Score, *, z: float = MEASURABLE_Z) -> bool:
    """a and b differ by more than z standard errors of their difference. Without a known
    standard error on both sides no difference is measurable."""
    se = difference_stderr(a, b)
    return se is not None and abs(a.value - b.value) > z * se


@dataclass(frozen=True)
class GapClosed:
    per_benchmark: dict[str, float]  # measurable benchmarks only
    median: float | None  # the headline; None when no benchmark is measurable
    excluded: list[str]  # gap not measurable, or a reference score missing


def gap_closed(
    scores: Mapping[str, Score],
    base: Mapping[str, Score],
    instruct: Mapping[str, Score],
    *,
    z: float = MEASURABLE_Z,
) -> GapClosed:
    """`(score − base) / (instruct − base)` per benchmark and its median.

    Benchmarks in `scores` whose instruct − base gap is not measurable (see `measurable`), or
    without both reference scores, are left out and named in `excluded`: dividing by a gap
    within its own noise turns noise into ±100 % swings.
    """
    per: dict[str, float] = {}
    excluded: list[str] = []
    for name in sorted(scores):
        if name not in base or name not in instruct:
            excluded.append(name)
            continue
        if not measurable(instruct[name], base[name], z=z):
            excluded.append(name)
            continue
        gap = instruct[name].value - base[name].value
        per[name] = (scores[name].value - base[name].value) / gap
    return GapClosed(per, statistics.median(per.values()) if per else None, excluded)


def headline(
    scores: Mapping[str, Score],
    base: Mapping[str, Score],
    instruct: Mapping[str, Score],
    *,
    z: float = MEASURABLE_Z,
    draws: int = HEADLINE_DRAWS,
    seed: int = 0,
) -> Score | None:
    """The model's headline with its standard error: median gap closed over the capability
    benchmarks in `scores`, or their mean score when no gap is measurable.

    The standard error redraws the model's own scores from normals (value, se), the references
    held fixed (a model compared with another against the same references shares their noise),
    and takes half the width of the central 68 % of the redrawn headlines.
    """
    if not scores:
        return None
    gap = gap_closed(scores, base, instruct, z=z)
    names = sorted(gap.per_benchmark) if gap.median is not None else sorted(scores)
    values = np.array([scores[n].value for n in names])  # (B,)
    if any(scores[n].known_stderr is None for n in names):
        point = gap.median if gap.median is not None else float(values.mean())
        return Score(point, None, len(names))
    ses = np.array([scores[n].known_stderr for n in names])  # (B,)
    rng = np.random.default_rng(seed)
    redrawn = values + rng.standard_normal((draws, len(names))) * ses  # (D, B)
    if gap.median is not None:
        b = np.array([base[n].value for n in names])
        i = np.array([instruct[n].value for n in names])
        point = gap.median
        per_draw = np.median((redrawn - b) / (i - b), axis=1)  # (D,)
    else:
        point = float(values.mean())
        per_draw = redrawn.mean(axis=1)  # (D,)
    low, high = np.percentile(per_draw, [15.865, 84.135])
    return Score(point, float(high - low) / 2, len(names))


def domain_vector(scores: Mapping[str, Score], domains: Mapping[str, str]) -> dict[str, Score]:
    """Mean score per domain over the benchmarks scored (benchmark → domain in `domains`); its
    standard error is √(Σ se²) / k over the domain's k benchmarks (independent item sets)."""
    by_domain: dict[str, list[Score]] = {}
    for name, score in scores.items():
        by_domain.setdefault(domains[name], []).append(score)
    vector = {}
    for domain, members in sorted(by_domain.items()):
        ses = [m.known_stderr for m in members]
        known = [se for se in ses if se is not None]
        stderr = (
            math.sqrt(sum(se * se for se in known)) / len(ses) if len(known) == len(ses) else None
        )
        vector[domain] = Score(
            sum(m.value for m in members) / len(members), stderr, sum(m.n for m in members)
        )
    return vector


def dominates(a: Mapping[str, Score], b: Mapping[str, Score], *, z: float = MEASURABLE_Z) -> bool:
    """a is at least as good as b in every domain both have, and measurably better in one."""
    shared = a.keys() & b.keys()
    return (
        bool(shared)
        and all(a[d].value >= b[d].value for d in shared)
        and any(a[d].value > b[d].value and measurable(a[d], b[d], z=z) for d in shared)
    )


def pareto_set(vectors: Mapping[str, Mapping[str, Score]], *, z: float = MEASURABLE_Z) -> list[str]:
    """The keys whose vectors no other vector dominates, in input order."""
    return [
        key
        for key, vector in vectors.items()
        if not any(dominates(other, vector, z=z) for o, other in vectors.items() if o != key)
    ]


@dataclass(frozen=True)
class PostPeak:
    nominated: str
    nominated_score: Score
    best: str
    best_score: Score

    @property
    def drop(self) -> float:
        return self.best_score.value - self.nominated_score.value

    @property
    def drop_stderr(self) -> float | None:
        return difference_stderr(self.best_score, self.nominated_score)


def post_peak_regression(
    history: Sequence[tuple[str, Score]], nominated: str, *, z: float = MEASURABLE_Z
) -> PostPeak | None:
    """A warning when the nominated checkpoint scores measurably below one of the agent's
    *earlier* checkpoints (the best of those, by headline).

    `history` is (checkpoint, headline) in the order the checkpoints were made.
    """
    keys = [key for key, _ in history]
    if nominated not in keys:
        raise ValueError(f"{nominated!r} is not in the history")
    position = keys.index(nominated)
    nominated_score = history[position][1]
    better = [
        (key, score)
        for key, score in history[:position]
        if score.value > nominated_score.value and measurable(score, nominated_score, z=z)
    ]
    if not better:
        return None
    best, best_score = max(better, key=lambda pair: pair[1].value)
    return PostPeak(nominated, nominated_score, best, best_score)


@dataclass(frozen=True)
class SafetyDelta:
    benchmark: str
    score: Score
    base: Score
    z: float = MEASURABLE_Z

    @property
    def delta(self) -> float:
        return self.score.value - self.base.value

    @property
    def stderr(self) -> float | None:
        return difference_stderr(self.score, self.base)

    @property
    def more_harmful(self) -> bool:
        """Measurably less safe than the base model."""
        return self.delta < 0 and measurable(self.score, self.base, z=self.z)


def safety_deltas(
    scores: Mapping[str, Score], base: Mapping[str, Score], *, z: float = MEASURABLE_Z
) -> list[SafetyDelta]:
    """Each safety score against the base model's (higher is safer); flagged when measurably
    lower."""
    return [
        SafetyDelta(name, scores[name], base[name], z) for name in sorted(scores) if name in base
    ]
