"""Spearman ρ and its bootstrap interval on hand-made data."""

import numpy as np
import pytest

from evalsuite.correlations import changes, correlate, spearman, spearman_bootstrap


def test_spearman_on_ranks():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 4, 1, 0]) == pytest.approx(-1.0)
    # ranks (1,2,3,4) vs (2,1,4,3): d² = 1+1+1+1 = 4, ρ = 1 − 6·4 / (4·15) = 0.6
    assert spearman([1, 2, 3, 4], [20, 10, 40, 30]) == pytest.approx(0.6)
    assert spearman([1, 2], [1, 2]) is None  # too few pairs
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # constant side


def test_bootstrap_interval_brackets_rho_and_narrows_with_more_data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=10)
    y = x + rng.normal(scale=1.0, size=10)
    rho, low, high = spearman_bootstrap(x, y, rounds=500, seed=3)
    assert low <= rho <= high and low >= -1 and high <= 1
    assert spearman_bootstrap(x, y, rounds=500, seed=3) == (rho, low, high)  # seeded
    big_x = rng.normal(size=400)
    big_y = big_x + rng.normal(scale=1.0, size=400)
    _, big_low, big_high = spearman_bootstrap(big_x, big_y, rounds=300, seed=3)
    assert big_high - big_low < high - low


def test_correlate_lines_models_up_by_name_and_changes_subtract():
    gpu = {"a": 100.0, "b": 300.0, "c": 200.0, "d": 50.0}
    rating = {"a": 1010.0, "b": 1100.0, "c": 1050.0, "extra": 900.0}
    result = correlate("gpu_hours", gpu, "rating", rating, rounds=100)
    assert result.models == ["a", "b", "c"] and result.n == 3
    assert result.rho == pytest.approx(1.0)
    assert changes({"a": 1.0, "b": 2.0}, {"a": 1.5, "c": 0.0}) == {"a": 0.5}


def test_the_bootstrap_computes_every_resample_as_scipy_would():
    from scipy import stats

    from evalsuite.correlations import _spearman_rows

    rng = np.random.default_rng(5)
    xs = rng.integers(0, 4, size=(200, 7)).astype(float)  # many ties, some constant rows
    ys = rng.normal(size=(200, 7))
    ys[:5] = 1.0
    rows = _spearman_rows(xs, ys)
    for x, y, value in zip(xs, ys, rows, strict=True):
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            assert np.isnan(value)
        else:
            assert value == pytest.approx(stats.spearmanr(x, y).statistic)
