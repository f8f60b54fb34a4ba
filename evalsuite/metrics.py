"""The numbers reported about evaluations, as pure functions on plain values.

Every score is a mean over items, higher is better (safety scores included: higher = safer),
and carries its standard error and item count (`Score`). Every comparison the reports make
(gap closed's references, safety against base, post-peak drops, Pareto dominance) asks the same
question: is the difference larger than its own noise? `measurable` decides it; gap closed
asks it one-sided (`measurably_above`: instruct above the base), so getting worse as the
instruct model did never counts as progress.
"""

from __future__ import annotations

import math
import statistics
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Two independent means differ measurably when |a − b| > z·√(se_a² + se_b²). z = 1.96 is the
# two-sided 5 % level: the 95 % interval of the difference excludes zero, the same confidence as
# the bootstrap intervals of the ratings and correlations shown next to these numbers. A smaller
# z (e.g. 1, "larger than one standard error") would flag a third of pure-noise gaps.
MEASURABLE_Z = 1.96
# The headline's standard error redraws the model and both references together (per item where
# all three have per-item values, else from normals (value, se)); this many draws, seeded so a
# report is reproducible.
HEADLINE_DRAWS = 2000
# What the reports say where a model has no headline because no benchmark qualifies.
NO_QUALIFYING = "no benchmark where instruct beats base"


@dataclass(frozen=True)
class Score:
    """A benchmark score: the mean over `n` items and its standard error (None: unknown).

    `items` (item id, value), where the per-item values are known: the headline's paired
    bootstrap redraws them. Not part of the score's identity."""

    value: float
    stderr: float | None
    n: int
    items: tuple[tuple[str, float], ...] | None = field(default=None, compare=False, repr=False)

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


def measurably_above(a: Score, b: Score, *, z: float = MEASURABLE_Z) -> bool:
    """a is above b by more than z standard errors of their difference (one-sided)."""
    se = difference_stderr(a, b)
    return se is not None and a.value - b.value > z * se


@dataclass(frozen=True)
class GapClosed:
    per_benchmark: dict[str, float]  # qualifying benchmarks only
    median: float | None  # the headline; None when no benchmark qualifies
    excluded: list[str]  # the others, by name
    reasons: dict[str, str] = field(default_factory=dict)  # excluded benchmark → why

    @property
    def why_none(self) -> str | None:
        """What to show instead of the median when there is none."""
        return None if self.median is not None else NO_QUALIFYING


def exclusion_reason(
    base: Score | None, instruct: Score | None, *, z: float = MEASURABLE_Z
) -> str | None:
    """Why a benchmark does not count towards gap closed, or None when it does: it counts only
    where instruct is measurably *above* the base (one-sided, `measurably_above`). Dividing by
    a gap within its noise turns noise into ±100 % swings, and dividing by a negative gap
    would count getting worse as progress."""
    if base is None or instruct is None:
        missing = [role for role, s in (("base", base), ("instruct", instruct)) if s is None]
        return f"no {' or '.join(missing)} score"
    versus = f"{instruct.value:.3f} vs {base.value:.3f}"
    if instruct.value <= base.value:
        return f"instruct not above base: {versus}"
    se = difference_stderr(instruct, base)
    if se is None:
        return f"reference standard error unknown: {versus}"
    if not measurably_above(instruct, base, z=z):
        return f"instruct − base within {z}·se ({z * se:.3f}): {versus}"
    return None


def gap_closed(
    scores: Mapping[str, Score],
    base: Mapping[str, Score],
    instruct: Mapping[str, Score],
    *,
    z: float = MEASURABLE_Z,
) -> GapClosed:
    """`(score − base) / (instruct − base)` per benchmark and its median, over the benchmarks in
    `scores` where instruct is measurably above the base (`exclusion_reason`); the others are
    named in `excluded`, each with its reason in `reasons`. A model worse than the base gets a
    negative gap closed."""
    per: dict[str, float] = {}
    reasons: dict[str, str] = {}
    for name in sorted(scores):
        reason = exclusion_reason(base.get(name), instruct.get(name), z=z)
        if reason is not None:
            reasons[name] = reason
            continue
        gap = instruct[name].value - base[name].value
        per[name] = (scores[name].value - base[name].value) / gap
    median = statistics.median(per.values()) if per else None
    return GapClosed(per, median, list(reasons), reasons)


def _stream(seed: int, *key: str) -> np.random.Generator:
    """A seeded random stream named by `key`: a benchmark's references are drawn from the same
    stream for every model compared against them, whatever other benchmarks it has."""
    return np.random.default_rng([seed, *(zlib.crc32(part.encode()) for part in key)])


def _redrawn(
    name: str, model: Score, base: Score, instruct: Score, draws: int, seed: int, model_key: str
) -> np.ndarray | None:
    """(D, 3) redrawn means of the model, base and instruct on one benchmark: a paired
    bootstrap over the items all three answered (shifted to the stored scores) when all three
    carry per-item values, else independent normals (value, se), the references' from the
    benchmark's stream and the model's from its own (`model_key`). None: an error is unknown."""
    scores = (model, base, instruct)
    if all(s.items for s in scores):
        by_item = [dict(s.items or ()) for s in scores]
        shared = sorted(set(by_item[0]) & set(by_item[1]) & set(by_item[2]))
        if len(shared) >= 2:
            values = np.array([[items[i] for items in by_item] for i in shared])  # (I, 3)
            picks = _stream(seed, name, "items").integers(0, len(shared), (draws, len(shared)))
            means = values[picks].mean(axis=1)  # (D, 3)
            shifted: np.ndarray = means - values.mean(axis=0) + [s.value for s in scores]
            return shifted
    ses = [s.known_stderr for s in scores]
    if any(se is None for se in ses):
        return None
    noise = np.stack(
        [
            _stream(seed, name, *key).standard_normal(draws)
            for key in (("model", model_key), ("base",), ("instruct",))
        ],
        axis=1,
    )  # (D, 3): the model's, the base's, the instruct's
    drawn: np.ndarray = np.array([s.value for s in scores]) + noise * np.array(ses)
    return drawn


@dataclass(frozen=True)
class Headline:
    gap: GapClosed
    score: Score | None  # None when no benchmark qualifies (`NO_QUALIFYING`)
    draws: np.ndarray | None  # (D,) redrawn medians; None without a known error everywhere


def headline_draws(
    scores: Mapping[str, Score],
    base: Mapping[str, Score],
    instruct: Mapping[str, Score],
    *,
    model_key: str = "",
    z: float = MEASURABLE_Z,
    draws: int = HEADLINE_DRAWS,
    seed: int = 0,
) -> Headline:
    """The model's headline, median gap closed over the benchmarks in `scores` that qualify
    (`gap_closed`), with its standard error and its redrawn medians, so that two models
    compared against the same references can be compared draw by draw
    (`post_peak_regression`).

    The standard error redraws, per benchmark, the model and both references together
    (`_redrawn`), takes the median gap closed of each draw, and half the width of the central
    68 % of those medians. A benchmark's reference draws (and, per item, the items drawn) are
    seeded by its name: a model compared with another against the same references shares them;
    the model's own normal draws are seeded by `model_key` as well.
    """
    gap = gap_closed(scores, base, instruct, z=z)
    if gap.median is None:
        return Headline(gap, None, None)
    names = sorted(gap.per_benchmark)
    columns = [_redrawn(n, scores[n], base[n], instruct[n], draws, seed, model_key) for n in names]
    known = [c for c in columns if c is not None]
    if len(known) < len(columns):
        return Headline(gap, Score(gap.median, None, len(names)), None)
    redrawn = np.stack(known, axis=1)  # (D, B, 3)
    m, b, i = redrawn[..., 0], redrawn[..., 1], redrawn[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_draw = np.median((m - b) / (i - b), axis=1)  # (D,)
    return Headline(gap, Score(gap.median, _half_width(per_draw), len(names)), per_draw)


def _half_width(draws: np.ndarray) -> float:
    """Half the width of the central 68 % of the draws: one standard error, robust to the
    draws where a redrawn reference gap nears zero."""
    low, high = np.nanpercentile(draws, [15.865, 84.135])
    return float(high - low) / 2


def headline(
    scores: Mapping[str, Score],
    base: Mapping[str, Score],
    instruct: Mapping[str, Score],
    **options: Any,
) -> Score | None:
    """The model's headline with its standard error (`headline_draws`, same options): None
    when no benchmark qualifies (say `NO_QUALIFYING`), never a mean score in its place."""
    return headline_draws(scores, base, instruct, **options).score


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
    # the drop's error from both headlines' shared draws (`headline_draws`), when known
    paired_stderr: float | None = None

    @property
    def drop(self) -> float:
        return self.best_score.value - self.nominated_score.value

    @property
    def drop_stderr(self) -> float | None:
        if self.paired_stderr is not None:
            return self.paired_stderr
        return difference_stderr(self.best_score, self.nominated_score)


def post_peak_regression(
    history: Sequence[tuple[str, Score]],
    nominated: str,
    *,
    z: float = MEASURABLE_Z,
    draws: Mapping[str, np.ndarray] | None = None,
) -> PostPeak | None:
    """A warning when the nominated checkpoint scores measurably below one of the agent's
    *earlier* checkpoints (the best of those, by headline).

    `history` is (checkpoint, headline) in the order the checkpoints were made. With `draws`
    (checkpoint → its redrawn headlines against the same references, `headline_draws`), a drop
    is judged against the spread of its draw-by-draw differences: the references' noise, common
    to both, cancels instead of counting twice.
    """
    keys = [key for key, _ in history]
    if nominated not in keys:
        raise ValueError(f"{nominated!r} is not in the history")
    position = keys.index(nominated)
    nominated_score = history[position][1]
    draws = draws or {}

    def paired(key: str) -> float | None:
        if draws.get(key) is None or draws.get(nominated) is None:
            return None
        return _half_width(draws[key] - draws[nominated])

    better = []
    for key, score in history[:position]:
        se = paired(key)
        drop = score.value - nominated_score.value
        if drop > 0 and (
            drop > z * se if se is not None else measurable(score, nominated_score, z=z)
        ):
            better.append((key, score, se))
    if not better:
        return None
    best, best_score, se = max(better, key=lambda found: found[1].value)
    return PostPeak(nominated, nominated_score, best, best_score, se)


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
