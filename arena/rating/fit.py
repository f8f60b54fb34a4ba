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
from scipy.special import expit, ndtri

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
        battles.n_models,
        battles.a,
        battles.b,
        battles.outcome,
        features,
        battles.weight,
        l2,
        battles.meat_weight,
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
    fit_warnings = data_warnings(battles, l2)
    try:
        theta, iterations = newton(design, start)
    except ConvergenceError as exc:
        theta, iterations = exc.theta, exc.iterations
        fit_warnings.append(f"the fit did not converge ({exc}): scores may be off")
    m = battles.n_models
    scores = _scores(theta[:m])

    alpha = 1.0 - confidence
    superiority = None
    if ci == "bootstrap":
        rounds, unconverged = bootstrap(design, theta, rounds=bootstrap_rounds, seed=seed)
        if unconverged:
            fit_warnings.append(
                f"{unconverged} of {bootstrap_rounds} bootstrap rounds did not converge: "
                "the intervals may be off"
            )
        round_scores = np.apply_along_axis(_scores, 1, rounds[:, :m])  # (R, M)
        low, high = np.quantile(round_scores, [alpha / 2, 1 - alpha / 2], axis=0)
        beta_low, beta_high = np.quantile(rounds[:, m:], [alpha / 2, 1 - alpha / 2], axis=0)
        superiority = (round_scores[:, :, None] > round_scores[:, None, :]).mean(axis=0)
    elif ci == "sandwich":
        covariance = sandwich_covariance(design, theta)
        # The normal quantile (scipy.stats' norm.ppf, to the bit) without importing
        # scipy.stats, a third of a command's start-up.
        z = float(ndtri(1 - alpha / 2))
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
        # Battles, not their weight (a merged row stands for several).
        n_battles=int(round(float(battles.battle_counts[battles.weight > 0].sum()))),
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
        warnings=fit_warnings,
    )


def bootstrap(design: Design, theta: Array, *, rounds: int, seed: int) -> tuple[Array, int]:
    """Refit on `rounds` resamples of the battles, each drawn as multinomial weights over the
    rows (the same as resampling battles with replacement) and warm-started at `theta`.
    Returns the (R, P) parameters of the rounds and how many of them did not converge (those
    keep where Newton stopped)."""
    rng = np.random.default_rng(seed)
    factor = cho_factor(hessian(theta, design))
    # A round's optimum to 1e-6 in rating units (0.0004 points) is far finer than the
    # bootstrap's own Monte Carlo error on an interval bound (points), and saves a pass or two
    # over the battles per round against 1e-8.
    tol = 1e-6
    total = design.weight.sum()
    n = len(design.weight)
    unit = bool(np.all(design.weight == 1.0))
    out = np.empty((rounds, design.n_params))
    unconverged = 0
    for i in range(rounds):
        if unit:
            weight = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        else:
            weight = rng.multinomial(int(round(total)), design.weight / total).astype(np.float64)
        resample = design.with_weight(weight)
        try:
            out[i], _ = chord(resample, theta, factor, tol=tol, single_precision=True)
        except ConvergenceError:  # a resample far from the full data: plain Newton
            try:
                out[i], _ = newton(resample, theta, tol=tol)
            except ConvergenceError as exc:
                out[i] = exc.theta
                unconverged += 1
    return out, unconverged


def sandwich_covariance(design: Design, theta: Array) -> Array:
    """Robust covariance H⁻¹ B H⁻¹, B = Σ w²·(p − y)²·x xᵀ: honest when the model is wrong
    (voters disagree more than Bradley–Terry says) or battles are not independent. Weights
    are importance weights here (a battle down-weighted as a near duplicate is still one
    observation): w² in the meat, so scaling every weight leaves the intervals as they are,
    and unit weights give the plain sandwich."""
    eta = design.linear_predictor(theta)
    residual = expit(eta) - design.y
    meat_weight = design.weight**2 if design.meat_weight is None else design.meat_weight
    meat = outer_sum(meat_weight * residual**2, design)
    bread = np.linalg.inv(hessian(theta, design))
    return bread @ meat @ bread


def data_warnings(battles: Battles, l2: float) -> list[str]:
    """What in the data makes some scores rest on the L2 penalty rather than the votes."""
    warnings: list[str] = []
    m = battles.n_models
    # Everything below depends on who met whom with what outcome and weight, not on the
    # rows' order or style: one row per (A, B, outcome) keeps it exact and makes the graphs
    # M² edges at most rather than one per vote.
    battles = battles.aggregated()
    present = battles.weight > 0
    a, b, y, w = (
        battles.a[present],
        battles.b[present],
        battles.outcome[present],
        battles.weight[present],
    )
    # Won (or lost) every battle, none tied: a tie, like a win and a loss, would bound it.
    points = np.bincount(a, weights=y * w, minlength=m) + np.bincount(
        b, weights=(1 - y) * w, minlength=m
    )
    games = np.bincount(a, weights=w, minlength=m) + np.bincount(b, weights=w, minlength=m)
    one_sided = (games > 0) & ((points == 0) | (points == games))  # (M,)
    for i in np.flatnonzero(one_sided):
        kind = "won" if points[i] else "lost"
        warnings.append(
            f"{battles.models[i]} {kind} every battle it played: its rating is finite only "
            f"because of the L2 penalty (λ={l2:g}) and is not meaningful"
        )
    met = coo_matrix((np.ones(len(a)), (a, b)), shape=(m, m))
    n_components, component = connected_components(met, directed=False)
    if n_components > 1:
        sizes = sorted(np.bincount(component).tolist(), reverse=True)
        warnings.append(
            f"the comparison graph has {n_components} disconnected groups (sizes {sizes}): "
            f"scores of models in different groups are not comparable; the L2 penalty "
            f"(λ={l2:g}) centres each group"
        )
    groups = _groups_without_finite_gaps(a, b, y, component, one_sided, m)
    if groups:
        named = " > ".join(_names(battles.models, g) for g in groups[:8])
        more = f" and {len(groups) - 8} more" if len(groups) > 8 else ""
        warnings.append(
            "the votes leave gaps between groups of models undetermined (no model in a later "
            f"group ever beat or tied one in an earlier group): {named}{more}; those gaps are "
            f"finite only because of the L2 penalty (λ={l2:g}) and are not meaningful"
        )
    return warnings


def _groups_without_finite_gaps(
    a: NDArray[np.intp],
    b: NDArray[np.intp],
    y: Array,
    component: NDArray[np.int32],
    one_sided: NDArray[np.bool_],
    m: int,
) -> list[NDArray[np.intp]]:
    """Ford's condition: Bradley–Terry has a finite optimum only if the graph with an edge
    from loser to winner of every decisive battle (both ways for a tie) is strongly connected
    within each group of models that met. The strongly connected groups of a connected group
    that fails, best first (a topological order), leaving out single models already reported
    as having won or lost every decisive battle; empty when every gap is determined."""
    tie = y == 0.5
    winner = np.where(y > 0.5, a, b)
    loser = np.where(y > 0.5, b, a)
    source = np.concatenate([loser[~tie], a[tie], b[tie]])
    target = np.concatenate([winner[~tie], b[tie], a[tie]])
    beaten = coo_matrix((np.ones(len(source)), (source, target)), shape=(m, m))
    n_groups, group = connected_components(beaten, directed=True, connection="strong")
    size = np.bincount(group, minlength=n_groups)
    reported = np.zeros(n_groups, dtype=bool)
    reported[group[one_sided]] = size[group[one_sided]] == 1
    # Unreported strong groups per connected group: more than one means an undetermined gap.
    unreported = np.unique(np.stack([component, group]), axis=1)  # (2, G): pairs present
    unreported = unreported[:, ~reported[unreported[1]]]
    split = np.bincount(unreported[0]) > 1
    if not split.any():
        return []
    # Topological order of the groups, winners first: a group comes once every group that
    # beat or tied one of its models has come.
    pairs = np.unique(np.stack([group[target], group[source]]), axis=1)  # (2, E) winner, loser
    above = [(int(hi), int(lo)) for hi, lo in pairs.T if hi != lo]
    pending = np.zeros(n_groups, dtype=np.intp)
    for _, lo in above:
        pending[lo] += 1
    order: list[int] = []
    ready = [g for g in range(n_groups) if pending[g] == 0]
    while ready:
        g = ready.pop(0)
        order.append(g)
        for hi, lo in above:
            if hi == g:
                pending[lo] -= 1
                if pending[lo] == 0:
                    ready.append(lo)
    shown = {int(g) for c, g in unreported.T if split[c]}
    return [np.flatnonzero(group == g) for g in order if g in shown]


def _names(models: list[str], members: NDArray[np.intp], limit: int = 5) -> str:
    names = [models[i] for i in members[:limit]]
    more = f" +{len(members) - limit} more" if len(members) > limit else ""
    return "{" + ", ".join(names) + more + "}"


def _scores(r: Array) -> Array:
    scores: Array = BASE_SCORE + SCALE * (r - r.mean())
    return scores


def _battles_per_model(battles: Battles) -> NDArray[np.intp]:
    """Battles each model played, whatever they weighed in the fit (a weight of 0 is a
    battle left out)."""
    m, played = battles.n_models, battles.weight > 0
    count = battles.battle_counts[played]
    per_model = np.bincount(battles.a[played], weights=count, minlength=m) + np.bincount(
        battles.b[played], weights=count, minlength=m
    )
    counts: NDArray[np.intp] = np.rint(per_model).astype(np.intp)
    return counts


def _rounded(values: dict[str, float] | None) -> dict[str, float] | None:
    return None if values is None else {k: round(v, 4) for k, v in values.items()}
