"""Battles as arrays: who met whom, who won, and how the two answers differed in style.

No Django here: the rating core is plain numpy so it can be tested, benchmarked and reused
on any battle file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

STYLE_FEATURES = ("length", "headers", "lists", "bold")
# Outcome of a battle for side A: a win, a loss, or a tie (of either kind) as half of each.
OUTCOME = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}


class BattleDataError(ValueError):
    pass


@dataclass(frozen=True)
class Battles:
    models: list[str]  # index -> name
    a: NDArray[np.intp]  # (n,) index of the model on side A
    b: NDArray[np.intp]  # (n,)
    outcome: NDArray[np.float64]  # (n,) 1 = A won, 0 = B won, 0.5 = tie
    style: NDArray[np.float64] | None  # (n, 4) (x_a - x_b) / (x_a + x_b + 1), not yet standardised
    # (n,) how much each row counts in the fit: a weight of 2 is the battle twice, 0.5 half a
    # battle (near-duplicate prompts are down-weighted: arena/battles/prompt_groups.py).
    weight: NDArray[np.float64]
    # Set only on merged rows (`aggregated`): how many battles each row stands for, and the sum
    # of their squared weights, which the sandwich's meat needs (weights are importance
    # weights there). None: one battle a row, its weight squared.
    count: NDArray[np.float64] | None = None
    meat_weight: NDArray[np.float64] | None = None

    @property
    def battle_counts(self) -> NDArray[np.float64]:
        """How many battles each row stands for (1 each unless rows were merged)."""
        return np.ones(len(self.weight)) if self.count is None else self.count

    @property
    def meat_weights(self) -> NDArray[np.float64]:
        """Σ w² of the battles each row stands for."""
        return self.weight**2 if self.meat_weight is None else self.meat_weight

    @property
    def n_battles(self) -> int:
        return int(round(float(self.weight.sum())))

    @property
    def n_models(self) -> int:
        return len(self.models)

    @classmethod
    def build(
        cls,
        model_a: Sequence[str],
        model_b: Sequence[str],
        winner: Sequence[str],
        *,
        style_a: NDArray[np.float64] | None = None,
        style_b: NDArray[np.float64] | None = None,
        weight: NDArray[np.float64] | Sequence[float] | None = None,
    ) -> Battles:
        """`style_a`/`style_b` are (n, 4) raw totals per side: tokens, headers, list items, bold.
        `weight` (default 1 each) is how much each battle counts (finite, ≥ 0)."""
        if not (len(model_a) == len(model_b) == len(winner)):
            raise BattleDataError("model_a, model_b and winner must have the same length")
        if len(winner) == 0:
            raise BattleDataError("no battles to rate")
        models = sorted(set(model_a) | set(model_b))
        index = {name: i for i, name in enumerate(models)}
        a = np.fromiter((index[m] for m in model_a), dtype=np.intp, count=len(model_a))
        b = np.fromiter((index[m] for m in model_b), dtype=np.intp, count=len(model_b))
        if np.any(a == b):
            row = int(np.flatnonzero(a == b)[0])
            raise BattleDataError(f"battle {row + 1} is {model_a[row]!r} against itself")
        try:
            outcome = np.array([OUTCOME[w] for w in winner], dtype=np.float64)
        except KeyError as exc:
            raise BattleDataError(f"unknown winner {exc.args[0]!r}") from None
        style = _style_of(style_a, style_b, len(winner))
        return cls(models, a, b, outcome, style, _weight_of(weight, len(winner)))

    @classmethod
    def from_codes(
        cls,
        names: Sequence[str],
        a: NDArray[np.integer],
        b: NDArray[np.integer],
        outcome: NDArray[np.float64],
        *,
        style_a: NDArray[np.float64] | None = None,
        style_b: NDArray[np.float64] | None = None,
        weight: NDArray[np.float64] | Sequence[float] | None = None,
    ) -> Battles:
        """`build` for columns already coded: `a`/`b` index `names` (which must be distinct),
        so a million battles never become a million Python strings. The result is the one
        `build` gives for the same battles: models in sorted order, the same arrays."""
        if not (len(a) == len(b) == len(outcome)):
            raise BattleDataError("a, b and outcome must have the same length")
        if len(outcome) == 0:
            raise BattleDataError("no battles to rate")
        used = np.zeros(len(names), dtype=bool)
        used[a] = True
        used[b] = True
        models = sorted(name for name, seen in zip(names, used, strict=True) if seen)
        index = {name: i for i, name in enumerate(models)}
        recode = np.array([index.get(name, -1) for name in names], dtype=np.intp)
        a_models, b_models = recode[a], recode[b]
        if np.any(a_models == b_models):
            row = int(np.flatnonzero(a_models == b_models)[0])
            raise BattleDataError(f"battle {row + 1} is {models[a_models[row]]!r} against itself")
        style = _style_of(style_a, style_b, len(outcome))
        return cls(
            models,
            a_models,
            b_models,
            np.asarray(outcome, np.float64),
            style,
            _weight_of(weight, len(outcome)),
        )

    @property
    def n_rows(self) -> int:
        """The number of battles, whatever they weigh (`n_battles` is their total weight)."""
        return len(self.outcome)

    def reweighted(self, weight: NDArray[np.float64] | Sequence[float]) -> Battles:
        """The same battles, each counting `weight` in the fit."""
        return Battles(
            self.models,
            self.a,
            self.b,
            self.outcome,
            self.style,
            _weight_of(weight, len(self.outcome)),
            self.count,
        )

    def without_style(self) -> Battles:
        return Battles(
            self.models,
            self.a,
            self.b,
            self.outcome,
            None,
            self.weight,
            self.count,
            self.meat_weight,
        )

    def aggregated(self) -> Battles:
        """Without style, the same battles as one weighted row per (A, B, outcome): at most
        M² × 3 rows whatever the number of votes. A Bradley–Terry fit weights each row's
        likelihood, gradient, Hessian and sandwich meat by its weight, and the rows merged
        are identical, so the fit is the same (to rounding: sums run in another order).
        Row-resampling bootstraps are not (they draw from rows), so they keep the battles."""
        m = self.n_models
        halves = self.outcome * 2.0
        outcome_code = halves.astype(np.intp)
        usual = len(halves) == 0 or (outcome_code.min() >= 0 and outcome_code.max() <= 2)
        if usual and np.array_equal(outcome_code, halves):
            values = np.array([0.0, 0.5, 1.0])  # the usual outcomes, coded without a sort
        else:
            values, outcome_code = np.unique(self.outcome, return_inverse=True)
        key = (self.a * m + self.b) * len(values) + outcome_code
        size = m * m * len(values)

        def summed(values: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.bincount(key, weights=values, minlength=size).astype(np.float64, copy=False)

        weight = summed(self.weight)
        count = summed(self.battle_counts * (self.weight > 0))
        meat = summed(self.meat_weights)
        (present,) = np.nonzero(weight)
        pair, code = np.divmod(present, len(values))
        a, b = np.divmod(pair, m)
        return Battles(
            self.models, a, b, values[code], None, weight[present], count[present], meat[present]
        )

    def swapped(self) -> Battles:
        """The same battles with every pair of sides exchanged."""
        style = None if self.style is None else -self.style
        return Battles(
            self.models,
            self.b,
            self.a,
            1.0 - self.outcome,
            style,
            self.weight,
            self.count,
            self.meat_weight,
        )


def _weight_of(weight: object, n: int) -> NDArray[np.float64]:
    if weight is None:
        return np.ones(n)
    w = np.asarray(weight, dtype=np.float64)
    if w.shape != (n,):
        raise BattleDataError(f"weight must have one value per battle ({n})")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise BattleDataError("weights must be finite and non-negative")
    if not np.any(w > 0):
        raise BattleDataError("every battle has weight 0: nothing to rate")
    return w


def style_difference(xa: NDArray[np.float64], xb: NDArray[np.float64]) -> NDArray[np.float64]:
    """(a - b) / (a + b + 1) per feature: bounded in (-1, 1), symmetric, 0 when equal."""
    return (xa - xb) / (xa + xb + 1.0)


def _style_of(style_a: object, style_b: object, n: int) -> NDArray[np.float64] | None:
    """The style covariates of `n` battles from both sides' feature counts, or None."""
    if style_a is None and style_b is None:
        return None
    if style_a is None or style_b is None:
        raise BattleDataError("style needs both sides")
    xa = np.asarray(style_a, dtype=np.float64)
    xb = np.asarray(style_b, dtype=np.float64)
    if xa.shape != (n, len(STYLE_FEATURES)) or xb.shape != xa.shape:
        raise BattleDataError(f"style arrays must have shape (n, {len(STYLE_FEATURES)})")
    return style_difference(xa, xb)
