"""Two models on their own battles: how far apart the votes put them, how sure that is, and
whether the votes can tell a preference for a model from a preference for its style.

A targeted round (an organizer's N battles between a chosen pair) is read this way: the fit
of `fit.py` on the round's battles alone, reduced to what a pair has — the gap between the two
scores, its interval, and the share of bootstrap rounds in which A is above B. With two
models the scores are 1000 ± gap/2, so the gap's interval is the first score's, doubled.

The fit always returns a number; this module refuses to show one the votes do not determine:
- too few votes for the parameters (`MIN_VOTES_PER_PARAMETER`: the usual rule of thumb for
  logistic regression, ten observations per parameter);
- a gap that rests on the L2 penalty instead of the votes: one side won every battle, or the
  style features separate the winners from the losers (the voter always chose the longer
  answer). Refitting with ten times the penalty moves such a gap or style coefficient by
  hundreds of points or whole log-odds, and a determined one by hundredths or less;
- style that moves with the model (the model's own variance inflation factor above
  `MAX_VARIANCE_INFLATION`): if A always writes longer answers, "voters prefer A" and "voters
  prefer longer answers" fit the votes equally well, and the penalty, not the votes, picks
  the split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from arena.rating.data import STYLE_FEATURES, Battles
from arena.rating.fit import BASE_SCORE, design_of, fit_ratings
from arena.rating.model import DEFAULT_L2

Array = NDArray[np.float64]

MIN_VOTES_PER_PARAMETER = 10
# The common threshold for a variance inflation factor (R² of 0.9 between the model and the
# style features): past it, the gap's standard error is more than three times what it would
# be if style and model varied independently.
MAX_VARIANCE_INFLATION = 10.0
PENALTY_CHECK_FACTOR = 10.0
PENALTY_CHECK_POINTS = 1.0  # a gap that moves more than this with the penalty rests on it
PENALTY_CHECK_LOG_ODDS = 0.1  # the same for a style coefficient (log-odds per SD)
MOVES_WITH_MODEL = 0.7  # a feature this correlated with the model is named in the reason


@dataclass(frozen=True)
class PairFit:
    """One fit (raw or style-controlled) of two models. Every number is None when
    `determined` is False; `reason` then says why."""

    style_controlled: bool
    model_a: str
    model_b: str
    n_votes: int
    confidence: float
    determined: bool
    reason: str = ""
    score_a: float | None = None
    score_b: float | None = None
    interval_a: tuple[float, float] | None = None
    interval_b: tuple[float, float] | None = None
    gap: float | None = None  # score_a − score_b, in score points (400 = 10:1 odds)
    gap_interval: tuple[float, float] | None = None
    a_above_b: float | None = None  # share of bootstrap rounds with A's score above B's
    a_beats_b: float | None = None  # P(A wins a battle) at equal style
    style_coefficients: dict[str, float] | None = None
    variance_inflation: float | None = None  # of the model given the style features
    notes: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        return "style-controlled" if self.style_controlled else "raw"

    @property
    def verdict(self) -> str:
        """The fit in a sentence: who is above whom at this confidence, or a tie."""
        if not self.determined:
            return f"not determined: {self.reason}"
        assert self.gap_interval is not None
        low, high = self.gap_interval
        level = f"{self.confidence:.0%}"
        if low > 0:
            return f"{self.model_a} above {self.model_b} ({level} interval of the gap above 0)"
        if high < 0:
            return f"{self.model_b} above {self.model_a} ({level} interval of the gap below 0)"
        return f"a tie: the {level} interval of the gap includes 0"

    def to_json(self) -> dict[str, Any]:
        def rounded(value: float | None, digits: int = 2) -> float | None:
            return None if value is None else round(value, digits)

        def pair(values: tuple[float, float] | None) -> list[float] | None:
            return None if values is None else [round(values[0], 2), round(values[1], 2)]

        return {
            "method": self.method,
            "n_votes": self.n_votes,
            "confidence": self.confidence,
            "determined": self.determined,
            "reason": self.reason,
            "verdict": self.verdict,
            "score_a": rounded(self.score_a),
            "score_b": rounded(self.score_b),
            "interval_a": pair(self.interval_a),
            "interval_b": pair(self.interval_b),
            "gap": rounded(self.gap),
            "gap_interval": pair(self.gap_interval),
            "a_above_b": rounded(self.a_above_b, 4),
            "a_beats_b": rounded(self.a_beats_b, 4),
            "style_coefficients": (
                None
                if self.style_coefficients is None
                else {k: round(v, 4) for k, v in self.style_coefficients.items()}
            ),
            # JSON has no infinity: a model column entirely in the style's span gives null.
            "variance_inflation": (
                rounded(self.variance_inflation)
                if self.variance_inflation is None or np.isfinite(self.variance_inflation)
                else None
            ),
            "notes": self.notes,
        }


def pair_fit(
    battles: Battles | None,
    *,
    model_a: str,
    model_b: str,
    style: bool,
    bootstrap_rounds: int = 200,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairFit:
    """Fit `model_a` against `model_b` on `battles` (None: there are none), raw or with style
    control, with bootstrap intervals seeded as the leaderboard's are."""
    n_votes = 0 if battles is None else battles.n_battles
    undetermined = _Undetermined(style, model_a, model_b, n_votes, confidence)
    if battles is None or n_votes == 0:
        return undetermined("no counted votes yet")
    if set(battles.models) != {model_a, model_b}:
        raise ValueError(f"the battles are between {battles.models}, not {model_a} and {model_b}")
    notes: list[str] = []
    varying: list[str] = []
    inflation = None
    if style:
        features = _standardised_features(battles)  # (n, K)
        varying = [n for j, n in enumerate(STYLE_FEATURES) if np.any(features[:, j] != 0)]
        if not varying:
            notes.append("the answers' style did not vary: style control changes nothing")
    parameters = 1 + len(varying)
    needed = MIN_VOTES_PER_PARAMETER * parameters
    if n_votes < needed:
        plural = "s" * (len(varying) != 1)
        what = "the gap" + (f" and {len(varying)} style coefficient{plural}" if varying else "")
        return undetermined(f"too few votes: {n_votes} of the {needed} needed to fit {what}")
    one_sided = _one_sided(battles, model_a, model_b)
    if one_sided:
        return undetermined(
            f"{one_sided} won every battle, none tied: the votes put no bound on the gap"
        )
    if varying:
        inflation, correlations = _model_style_collinearity(battles, model_a, features)
        if inflation > MAX_VARIANCE_INFLATION:
            moving = [
                f"{name} (correlation {correlations[STYLE_FEATURES.index(name)]:+.2f})"
                for name in varying
                if abs(correlations[STYLE_FEATURES.index(name)]) >= MOVES_WITH_MODEL
            ]
            return undetermined(
                "the answers' style moved with the model"
                + (f" ({', '.join(moving)})" if moving else "")
                + f": variance inflation {_number(inflation)} > {MAX_VARIANCE_INFLATION:g}, so"
                " the votes cannot tell a preference for a model from one for its style",
                variance_inflation=inflation,
            )
    # The penalty check needs two point fits, not the bootstrap: it runs first, so a round the
    # votes do not determine costs no bootstrap.
    point = fit_ratings(battles, style=style, ci=None)
    stiffer = fit_ratings(battles, style=style, ci=None, l2=DEFAULT_L2 * PENALTY_CHECK_FACTOR)
    gap = point.score_of(model_a).score - point.score_of(model_b).score
    moved = abs(gap - (stiffer.score_of(model_a).score - stiffer.score_of(model_b).score))
    if moved > PENALTY_CHECK_POINTS:
        return undetermined(
            f"the gap rests on the fit's penalty, not the votes (it moves {moved:.0f} points "
            f"with {PENALTY_CHECK_FACTOR:g}× the penalty)",
            variance_inflation=inflation,
        )
    if point.style_coefficients and stiffer.style_coefficients:
        unbounded = [
            name
            for name, value in point.style_coefficients.items()
            if abs(value - stiffer.style_coefficients[name]) > PENALTY_CHECK_LOG_ODDS
        ]
        if unbounded:
            return undetermined(
                f"the style features ({', '.join(unbounded)}) alone separate wins from losses:"
                " the votes put no bound on their effect, so none on the gap beside it",
                variance_inflation=inflation,
            )
    result = fit_ratings(
        battles,
        style=style,
        ci="bootstrap",
        bootstrap_rounds=bootstrap_rounds,
        seed=seed,
        confidence=confidence,
        warm_start=point.theta,
    )
    a, b = result.score_of(model_a), result.score_of(model_b)
    assert result.superiority is not None
    i, j = result.models.index(model_a), result.models.index(model_b)
    notes.extend(w for w in result.warnings if "converge" in w)
    return PairFit(
        style_controlled=style,
        model_a=model_a,
        model_b=model_b,
        n_votes=n_votes,
        confidence=confidence,
        determined=True,
        score_a=a.score,
        score_b=b.score,
        interval_a=(a.ci_low, a.ci_high),
        interval_b=(b.ci_low, b.ci_high),
        gap=a.score - b.score,
        # Each bootstrap round's scores are 1000 ± gap/2 too, so the gap's percentiles are
        # A's, doubled about 1000 (percentiles commute with an increasing linear map).
        gap_interval=(2 * (a.ci_low - BASE_SCORE), 2 * (a.ci_high - BASE_SCORE)),
        a_above_b=float(result.superiority[i, j]),
        a_beats_b=float(result.win_probability[i, j]),
        style_coefficients=result.style_coefficients,
        variance_inflation=inflation,
        notes=notes,
    )


@dataclass(frozen=True)
class _Undetermined:
    style: bool
    model_a: str
    model_b: str
    n_votes: int
    confidence: float

    def __call__(self, reason: str, *, variance_inflation: float | None = None) -> PairFit:
        return PairFit(
            style_controlled=self.style,
            model_a=self.model_a,
            model_b=self.model_b,
            n_votes=self.n_votes,
            confidence=self.confidence,
            determined=False,
            reason=reason,
            variance_inflation=variance_inflation,
        )


def _standardised_features(battles: Battles) -> Array:
    design = design_of(battles, style=True)
    assert design.features is not None
    return design.features


def _one_sided(battles: Battles, model_a: str, model_b: str) -> str:
    """The model that won every battle with none tied, or ""."""
    present = battles.weight > 0
    a_index = battles.models.index(model_a)
    a_on_side_a = battles.a[present] == a_index
    outcome = battles.outcome[present]
    a_points = np.where(a_on_side_a, outcome, 1.0 - outcome)  # (n,) 1 = A won
    if np.all(a_points == 1.0):
        return model_a
    if np.all(a_points == 0.0):
        return model_b
    return ""


def _model_style_collinearity(
    battles: Battles, model_a: str, features: Array
) -> tuple[float, Array]:
    """How much the model column of the design lies in the span of the style features.

    The model column is +1 where `model_a` is on side A and −1 where it is on side B (the
    fit's ln10 factor does not matter here). Returns its variance inflation factor
    1 / (1 − R²), with R² of its weighted least-squares projection on the features (no
    intercept: the likelihood has none), and its correlation with each feature (0 for one
    that does not vary)."""
    x = np.where(battles.a == battles.models.index(model_a), 1.0, -1.0)  # (n,)
    w = battles.weight  # (n,)
    wx = w * x
    gram = features.T @ (w[:, None] * features)  # (K, K)
    cross = features.T @ wx  # (K,)
    explained = float(cross @ np.linalg.pinv(gram) @ cross)
    total = float(x @ wx)
    r_squared = min(1.0, explained / total)
    inflation = np.inf if r_squared >= 1.0 - 1e-12 else 1.0 / (1.0 - r_squared)
    norms = np.sqrt(np.diag(gram) * total)  # (K,)
    correlations = np.divide(cross, norms, out=np.zeros_like(cross), where=norms > 0)
    return float(inflation), correlations


def _number(value: float) -> str:
    return "∞" if not np.isfinite(value) else f"{value:.1f}"
