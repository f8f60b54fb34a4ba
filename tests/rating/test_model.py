import numpy as np
import pytest
from scipy.linalg import cho_factor
from scipy.optimize import approx_fprime, check_grad

from arena.rating import model
from arena.rating.fit import design_of
from arena.rating.model import ConvergenceError, chord, gradient, hessian, newton, objective
from arena.rating.synthetic import synthetic_battles


@pytest.fixture(params=[True, False], ids=["style", "raw"])
def design(request):
    battles, _ = synthetic_battles(n_battles=600, n_models=6, seed=3, tie_share=0.2)
    return design_of(battles, style=request.param)


def test_the_gradient_matches_finite_differences(design):
    theta = np.random.default_rng(0).normal(0, 0.3, design.n_params)
    assert check_grad(objective, gradient, theta, design) < 1e-4 * np.linalg.norm(
        gradient(theta, design)
    )


def test_the_hessian_matches_finite_differences_of_the_gradient(design):
    theta = np.random.default_rng(1).normal(0, 0.3, design.n_params)
    numeric = np.array(
        [
            approx_fprime(theta, lambda t, i=i: gradient(t, design)[i], 1e-6)
            for i in range(design.n_params)
        ]
    )
    np.testing.assert_allclose(hessian(theta, design), numeric, rtol=1e-4, atol=1e-3)


def test_newton_finds_a_zero_of_the_gradient(design):
    theta, iterations = newton(design)
    assert np.max(np.abs(gradient(theta, design))) < 1e-6
    assert iterations < 20


def test_the_chord_method_reaches_the_same_optimum_on_a_resample(design):
    theta, _ = newton(design)
    weight = np.random.default_rng(2).poisson(1.0, len(design.weight)).astype(float)
    resample = design.with_weight(weight)
    exact, _ = newton(resample, theta)
    approximate, _ = chord(resample, theta, cho_factor(hessian(theta, design)), tol=1e-10)
    np.testing.assert_allclose(approximate, exact, atol=1e-8)
    fast, _ = chord(
        resample, theta, cho_factor(hessian(theta, design)), tol=1e-7, single_precision=True
    )
    np.testing.assert_allclose(fast, exact, atol=1e-6)  # 0.0004 points: what bootstrap asks


def test_newton_reports_steps_that_cannot_descend_instead_of_stopping_there(design, monkeypatch):
    optimum, _ = newton(design)
    start = optimum + np.random.default_rng(4).normal(0, 1e-3, design.n_params)
    value = model._value

    def nowhere_lower(eta, theta, design):  # every point but the start is worse
        return value(eta, theta, design) + (0.0 if np.array_equal(theta, start) else 1.0)

    monkeypatch.setattr(model, "_value", nowhere_lower)
    with pytest.raises(ConvergenceError, match="did not lower the objective") as failure:
        newton(design, start)
    np.testing.assert_array_equal(failure.value.theta, start)  # where it stopped, not beyond
