"""Per-battle weights: a battle of weight 2 gives the estimate of that battle twice."""

import numpy as np
import pytest

from arena.rating import BattleDataError, Battles, fit_ratings
from arena.rating.synthetic import synthetic_battles


@pytest.fixture
def small():
    battles, _ = synthetic_battles(n_battles=400, n_models=4, seed=11, tie_share=0.2)
    return battles


def _rows(battles: Battles, index: np.ndarray) -> Battles:
    """The battles at `index` (a row may repeat), each of weight 1."""
    return Battles(
        battles.models,
        battles.a[index],
        battles.b[index],
        battles.outcome[index],
        battles.style[index],
        np.ones(len(index)),
    )


@pytest.mark.parametrize("style", [True, False], ids=["style", "raw"])
def test_a_weight_of_two_is_the_same_as_the_battle_twice(small, style):
    doubled = np.arange(0, small.n_rows, 3)  # every third battle counts twice
    weight = np.ones(small.n_rows)
    weight[doubled] = 2.0
    weighted = small.reweighted(weight)
    repeated = _rows(small, np.concatenate([np.arange(small.n_rows), doubled]))
    if not style:
        weighted, repeated = weighted.without_style(), repeated.without_style()
    one = fit_ratings(weighted, style=style, ci="sandwich")
    two = fit_ratings(repeated, style=style, ci="sandwich")
    # The table counts battles played, whatever they weighed.
    assert (one.n_battles, two.n_battles) == (small.n_rows, small.n_rows + len(doubled))
    for score in two.scores:
        assert one.score_of(score.model).score == pytest.approx(score.score, abs=1e-8)
    if style:
        for name, value in two.style_coefficients.items():
            assert one.style_coefficients[name] == pytest.approx(value, abs=1e-10)


def test_a_weight_of_zero_is_the_battle_left_out():
    # x beats y twice and y beats x once; a fourth battle (y beats x) weighs nothing.
    kept = Battles.build(["x", "x", "y"], ["y", "y", "x"], ["model_a", "model_a", "model_a"])
    zeroed = Battles.build(
        ["x", "x", "y", "y"],
        ["y", "y", "x", "x"],
        ["model_a", "model_a", "model_a", "model_a"],
        weight=[1, 1, 1, 0],
    )
    a = fit_ratings(kept, style=False, ci=None)
    b = fit_ratings(zeroed, style=False, ci=None)
    assert b.n_battles == 3 and b.score_of("y").n_battles == 3
    assert b.score_of("x").score == pytest.approx(a.score_of("x").score, abs=1e-8)
    # Raw Bradley–Terry of 2 wins to 1 between two models: a gap of 400·log10(2) points.
    gap = a.score_of("x").score - a.score_of("y").score
    assert gap == pytest.approx(400 * np.log10(2), abs=0.5)


@pytest.mark.parametrize("weight", [[1, -1], [1, float("nan")], [0, 0], [1]])
def test_bad_weights_are_refused(weight):
    with pytest.raises(BattleDataError):
        Battles.build(["x", "y"], ["y", "x"], ["model_a", "tie"], weight=weight)


def test_scaling_every_weight_leaves_scores_and_sandwich_intervals_as_they_are(small):
    # Weights say how much battles count against each other: the same weights times 3 are
    # the same fit (up to the tiny L2 penalty), and the same intervals.
    weight = np.random.default_rng(4).uniform(0.2, 2.0, small.n_rows)
    one = fit_ratings(small.reweighted(weight), ci="sandwich")
    three = fit_ratings(small.reweighted(3 * weight), ci="sandwich")
    for score in one.scores:
        other = three.score_of(score.model)
        assert other.score == pytest.approx(score.score, abs=0.05)
        assert other.ci_high - other.ci_low == pytest.approx(score.ci_high - score.ci_low, rel=1e-3)


@pytest.mark.parametrize("weighted", [False, True], ids=["unit", "dedup-weights"])
def test_merged_rows_give_the_plain_fit_its_intervals_and_its_battle_counts(small, weighted):
    """The raw live fit merges identical rows (`Battles.aggregated`): with near-duplicate
    weights the sandwich's meat needs Σw² of the rows merged, not the merged weight squared,
    and the table still counts battles, not rows."""
    rng = np.random.default_rng(5)
    weight = rng.choice([1.0, 1 / np.sqrt(2), 1 / np.sqrt(7)], small.n_rows) if weighted else None
    plain = (small.reweighted(weight) if weighted else small).without_style()
    merged = plain.aggregated()
    assert merged.n_rows < plain.n_rows / 10
    one = fit_ratings(plain, style=False, ci="sandwich")
    two = fit_ratings(merged, style=False, ci="sandwich")
    assert two.n_battles == one.n_battles == small.n_rows
    for x, y in zip(one.scores, two.scores, strict=True):
        assert (x.model, x.n_battles) == (y.model, y.n_battles)
        assert x.score == pytest.approx(y.score, abs=1e-6)
        assert (x.ci_low, x.ci_high) == pytest.approx((y.ci_low, y.ci_high), abs=1e-6)
