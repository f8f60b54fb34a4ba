"""Spearman rank correlations with bootstrap intervals: pure numpy/scipy, no Django.

The study's analyses: GPU-hours used vs human rating, benchmark progress (gap closed) vs human
rating (style-controlled and raw), and the phase-1 → phase-2 changes of the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

BOOTSTRAP_ROUNDS = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Correlation:
    x: str
    y: str
    n: int
    rho: float | None  # None with fewer than 3 pairs or a constant side
    ci_low: float | None
    ci_high: float | None
    models: list[str]

    def to_json(self) -> dict[str, object]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {"x": self.x, "y": self.y, "n": self.n, "rho": r(self.rho),
                "ci": [r(self.ci_low), r(self.ci_high)], "models": self.models}  # fmt: skip


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)  # (n,), (n,)
    if len(xs) < 3 or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    return float(stats.spearmanr(xs, ys).statistic)


def spearman_bootstrap(
    x: Sequence[float],
    y: Sequence[float],
    *,
    rounds: int = BOOTSTRAP_ROUNDS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float | None, float | None, float | None]:
    """ρ and its percentile bootstrap interval (pairs resampled with replacement; resamples
    where one side is constant are skipped)."""
    rho = spearman(x, y)
    if rho is None:
        return None, None, None
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(xs), size=(rounds, len(xs)))  # (R, n)
    values = _spearman_rows(xs[picks], ys[picks])  # (R,), NaN where one side is constant
    values = values[~np.isnan(values)]
    if not len(values):
        return rho, None, None
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return rho, float(low), float(high)


def _spearman_rows(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row pair at once: Pearson's r of the average ranks (ties shared, as
    `scipy.stats.spearmanr` does); NaN for a row where one side is constant."""
    rx = stats.rankdata(xs, axis=1)  # (R, n)
    ry = stats.rankdata(ys, axis=1)  # (R, n)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    denominator = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))  # (R,)
    constant = (np.ptp(xs, axis=1) == 0) | (np.ptp(ys, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(constant, np.nan, (rx * ry).sum(axis=1) / denominator)


def correlate(
    x_name: str,
    x: Mapping[str, float],
    y_name: str,
    y: Mapping[str, float],
    *,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 0,
) -> Correlation:
    """Correlate two per-model quantities over the models both have."""
    models = sorted(x.keys() & y.keys())
    rho, low, high = spearman_bootstrap(
        [x[m] for m in models], [y[m] for m in models], rounds=rounds, seed=seed
    )
    return Correlation(x_name, y_name, len(models), rho, low, high, models)


def changes(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after − before, for the keys both have (e.g. an agent's phase-1 → phase-2 change)."""
    return {key: after[key] - before[key] for key in sorted(before.keys() & after.keys())}
