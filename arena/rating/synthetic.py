"""Seeded synthetic battles with known ratings and style effects, for tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from arena.rating.data import Battles, style_difference
from arena.rating.model import LN10

Array = NDArray[np.float64]


@dataclass(frozen=True)
class SyntheticTruth:
    ratings: Array  # (M,) base-10 logit units, mean 0
    style_effect: Array  # (4,) log-odds per unit of the raw difference (a-b)/(a+b+1)

    @property
    def scores(self) -> Array:
        scores: Array = 1000.0 + 400.0 * (self.ratings - self.ratings.mean())
        return scores


def synthetic_battles(
    *,
    n_battles: int,
    n_models: int,
    seed: int,
    rating_sd: float = 0.5,
    style_effect: tuple[float, float, float, float] = (1.0, 0.3, 0.4, 0.2),
    tie_share: float = 0.0,
    verbose_models: int = 0,
) -> tuple[Battles, SyntheticTruth]:
    """Battles between uniformly drawn pairs on random sides. Each model has its own habits
    (answer length, headers, list items, bold); the first `verbose_models` write about three
    times longer and more formatted answers, so a raw fit overrates them when style sways
    votes. A tie happens with probability `tie_share`, independent of the matchup."""
    rng = np.random.default_rng(seed)
    ratings = rng.normal(0.0, rating_sd, n_models)
    ratings -= ratings.mean()
    length = rng.uniform(80, 300, n_models)
    markup = rng.uniform(0.2, 3.0, (n_models, 3))
    length[:verbose_models] *= 3.0
    markup[:verbose_models] *= 3.0

    a = rng.integers(0, n_models, n_battles)
    b = (a + rng.integers(1, n_models, n_battles)) % n_models  # never a == b

    def habits(model: NDArray[np.intp]) -> Array:
        totals = np.empty((len(model), 4))
        totals[:, 0] = rng.poisson(length[model])
        totals[:, 1:] = rng.poisson(markup[model])
        return totals

    xa, xb = habits(a), habits(b)
    effect = np.asarray(style_effect, dtype=np.float64)
    p = expit(LN10 * (ratings[a] - ratings[b]) + style_difference(xa, xb) @ effect)
    outcome = (rng.random(n_battles) < p).astype(np.float64)
    outcome[rng.random(n_battles) < tie_share] = 0.5

    models = [f"model-{i:03d}" for i in range(n_models)]
    battles = Battles(
        models,
        a.astype(np.intp),
        b.astype(np.intp),
        outcome,
        style_difference(xa, xb),
        np.ones(n_battles),
    )
    return battles, SyntheticTruth(ratings, effect)
