"""Fit ratings with intervals: the API the leaderboard, the `ratings` command and the
benchmark call. See model.py for the likelihood."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_factor
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import expit
from scipy.stats import norm

from arena.rating.data import STYLE_FEATURES, Battles
from arena.rating.model import (
    DEFAULT_L2,
    LN10,
    ConvergenceError,
    Design,
    chord,
    hessian,
    newton,
    outer_sum,
)

BASE_SCORE = 1000.0
SCALE = 400.0  # score points per base-10 logit: 400 points = 10:1 odds
CiMethod = Literal["bootstrap", "sandwich"]
Array = NDArray[np.float64]


@dataclass(frozen=True)
class ModelScore:
    model: str
    score: float
    ci_low: float
    ci_high: float
    rank: int
    n_battles: int


@dataclass
class RatingResult:
    style_controlled: bool
    ci_method: CiMethod | None
    confidence: float
    n_battles: int
    models: list[str]  # the order of every matrix below
    scores: list[ModelScore]  # best first
    style_coefficients: dict[str, float] | None  # log-odds per standard deviation of a feature
    style_intervals: dict[str, tuple[float, float]] | None
    win_probability: Array  # (M, M) P(row beats column) at equal style
    superiority: Array | None  # (M, M) share of bootstrap rounds with row above column
    theta: Array  # fitted parameters, for warm starts
    l2: float
    iterations: int
    warnings: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        return "style-controlled bradley-terry" if self.style_controlled else "bradley-terry"

    def score_of(self, model: str) -> ModelScore:
        return next(s for s in self.scores if s.model == model)

    def to_json(self) -> dict[str, Any]:
        """The rating command's contract (DESIGN.md §5), plus a few documented extras."""
        return {
            "method": self.method,
            "ci": self.ci_method,
            "confidence": self.confidence,
            "n_battles": self.n_battles,
            "scores": [
                {
                    "model": s.model,
                    "score": round(s.score, 2),
                    "ci_low": round(s.ci_low, 2),
                    "ci_high": round(s.ci_high, 2),
                    "rank": s.rank,
                    "n_battles": s.n_battles,
                }
                for s in self.scores
            ],
            "style_coefficients": _rounded(self.style_coefficients),
            "style_intervals": (
                None
                if self.style_intervals is None
                else {
                    k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in self.style_intervals.items()
                }
            ),
            "l2": self.l2,
            "warnings": self.warnings,
        }


@dataclass(frozen=True)
class Standardiser:
    mean: Array
    std: Array

    @classmethod
    def of(cls, style: Array, weight: Array) -> Standardiser:
        total = weight.sum()
        mean = (weight @ style) / total
        var = (weight @ (style - mean) ** 2) / total
        std = np.sqrt(var)
        # A feature that never varies carries no information: leave it at zero.
        return cls(mean, np.where(std > 0, std, np.inf))

    def apply(self, style: Array) -> Array:
        return (style - self.mean) / self.std


def design_of(battles: Battles, *, style: bool, l2: float = DEFAULT_L2) -> Design:
    features = None
    if style:
        if battles.style is None:
            raise ValueError("style control needs the battles' style features")
        features = Standardiser.of(battles.style, battles.weight).apply(battles.style)
    return Design(
        battles.n_models, battles.a, battles.b, battles.outcome, features, battles.weight, l2
    )


def fit_ratings(
    battles: Battles,
    *,
    style: bool = True,
    ci: CiMethod | None = "bootstrap",
    bootstrap_rounds: int = 100,
    seed: int = 0,
    confidence: float = 0.95,
    l2: float = DEFAULT_L2,
    warm_start: Array | None = None,
) -> RatingResult:
    design = design_of(battles, style=style, l2=l2)
    start = (
        warm_start if warm_start is not None and warm_start.shape == (design.n_params,) else None
    )
    theta, iterations = newton(design, start)
    m = battles.n_models
    scores = _scores(theta[:m])

    alpha = 1.0 - confidence
    superiority = None
    if ci == "bootstrap":
        rounds = bootstrap(design, theta, rounds=bootstrap_rounds, seed=seed)  # (R, P)
        round_scores = np.apply_along_axis(_scores, 1, rounds[:, :m])  # (R, M)
        low, high = np.quantile(round_scores, [alpha / 2, 1 - alpha / 2], axis=0)
        beta_low, beta_high = np.quantile(rounds[:, m:], [alpha / 2, 1 - alpha / 2], axis=0)
        superiority = (round_scores[:, :, None] > round_scores[:, None, :]).mean(axis=0)
    elif ci == "sandwich":
        covariance = sandwich_covariance(design, theta)
        z = float(norm.ppf(1 - alpha / 2))
        centre = np.eye(m) - 1.0 / m  # scores are centred ratings
        score_sd = SCALE * np.sqrt(np.diag(centre @ covariance[:m, :m] @ centre.T))
        low, high = scores - z * score_sd, scores + z * score_sd
        beta_sd = np.sqrt(np.diag(covariance[m:, m:]))
        beta_low, beta_high = theta[m:] - z * beta_sd, theta[m:] + z * beta_sd
    else:
        low, high = scores.copy(), scores.copy()
        beta_low, beta_high = theta[m:], theta[m:]

    counts = _battles_per_model(battles)
    ranks = 1 + (low[None, :] > high[:, None]).sum(axis=1)  # models surely above this one
    order = np.argsort(-scores, kind="stable")
    style_names = STYLE_FEATURES if style else ()
    diff = theta[:m, None] - theta[None, :m]
    return RatingResult(
        style_controlled=style,
        ci_method=ci,
        confidence=confidence,
        n_battles=battles.n_battles,
        models=list(battles.models),
        scores=[
            ModelScore(
                battles.models[i],
                float(scores[i]),
                float(low[i]),
                float(high[i]),
                int(ranks[i]),
                int(counts[i]),
            )
            for i in order
        ],
        style_coefficients=dict(zip(style_names, map(float, theta[m:]), strict=True))
        if style
        else None,
        style_intervals=(
            {
                name: (float(lo), float(hi))
                for name, lo, hi in zip(style_names, beta_low, beta_high, strict=True)
            }
            if style
            else None
        ),
        win_probability=expit(LN10 * diff),
        superiority=superiority,
        theta=theta,
        l2=l2,
        iterations=iterations,
        warnings=data_warnings(battles, l2),
    )


def bootstrap(design: Design, theta: Array, *, rounds: int, seed: int) -> Array:
    """Refit on `rounds` resamples of the battles, each drawn as multinomial weights over the
    rows (the same as resampling battles with replacement) and warm-started at `theta`."""
    rng = np.random.default_rng(seed)
    factor = cho_factor(hessian(theta, design))
    total = design.weight.sum()
    n = len(design.weight)
    unit = bool(np.all(design.weight == 1.0))
    out = np.empty((rounds, design.n_params))
    for i in range(rounds):
        if unit:
            weight = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        else:
            weight = rng.multinomial(int(round(total)), design.weight / total).astype(np.float64)
        resample = design.with_weight(weight)
        try:
            out[i], _ = chord(resample, theta, factor, tol=1e-8)
        except ConvergenceError:  # a resample far from the full data: plain Newton
            out[i], _ = newton(resample, theta, tol=1e-8)
    return out


def sandwich_covariance(design: Design, theta: Array) -> Array:
    """Robust covariance H⁻¹ B H⁻¹, B = Σ w·(p − y)²·x xᵀ: honest when the model is wrong
    (voters disagree more than Bradley–Terry says) or battles are not independent."""
    eta = design.linear_predictor(theta)
    residual = expit(eta) - design.y
    meat = outer_sum(design.weight * residual**2, design)
    bread = np.linalg.inv(hessian(theta, design))
    return bread @ meat @ bread


def data_warnings(battles: Battles, l2: float) -> list[str]:
    warnings: list[str] = []
    m = battles.n_models
    decisive = battles.outcome != 0.5
    wins = np.bincount(battles.a, weights=decisive * battles.outcome * battles.weight, minlength=m)
    wins += np.bincount(
        battles.b, weights=decisive * (1 - battles.outcome) * battles.weight, minlength=m
    )
    games = np.bincount(battles.a, weights=decisive * battles.weight, minlength=m)
    games += np.bincount(battles.b, weights=decisive * battles.weight, minlength=m)
    for i, name in enumerate(battles.models):
        if games[i] > 0 and wins[i] in (0, games[i]):
            kind = "won" if wins[i] else "lost"
            warnings.append(
                f"{name} {kind} every decisive battle: its rating is finite only because of the "
                f"L2 penalty (λ={l2:g}) and is not meaningful"
            )
    graph = coo_matrix((np.ones(len(battles.a)), (battles.a, battles.b)), shape=(m, m))
    groups, labels = connected_components(graph, directed=False)
    if groups > 1:
        sizes = np.bincount(labels)
        warnings.append(
            f"the comparison graph has {groups} disconnected groups (sizes {sorted(sizes.tolist(), reverse=True)}): "
            f"scores of models in different groups are not comparable; the L2 penalty (λ={l2:g}) "
            "centres each group"
        )
    return warnings


def _scores(r: Array) -> Array:
    return BASE_SCORE + SCALE * (r - r.mean())


def _battles_per_model(battles: Battles) -> NDArray[np.float64]:
    m = battles.n_models
    plus = np.bincount(battles.a, weights=battles.weight, minlength=m).astype(
        np.float64, copy=False
    )
    return plus + np.bincount(battles.b, weights=battles.weight, minlength=m)


def _rounded(values: dict[str, float] | None) -> dict[str, float] | None:
    return None if values is None else {k: round(v, 4) for k, v in values.items()}
