"""The (style-controlled) Bradley–Terry likelihood with its analytic gradient and Hessian.

    P(A beats B) = σ(ln10 · (r_A − r_B) + β · f)

r are ratings in base-10 logit units (400 score points = 10:1 odds), f the standardised style
differences of the battle (absent for raw Bradley–Terry). A tie counts as half a win and half
a loss, so each battle contributes  w · (softplus(η) − y·η)  with y ∈ {0, ½, 1}.

A small L2 penalty ½·λ·(‖r‖² + ‖β‖²) keeps the optimum finite when the data alone would not
(a model that only ever won, comparison groups that never met, a style that always won). It
also pins the free offset of the ratings: at the optimum Σ r = 0.

Parameters are one vector θ = [r (M), β (K)]. Every function here is O(n) in the number of
battle rows: the M×M rating block of the Hessian is accumulated with one `bincount` over the
(A, B) pair index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_solve
from scipy.special import expit

LN10 = float(np.log(10.0))
DEFAULT_L2 = 1e-3

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Design:
    """What the likelihood needs, with weights: one row per battle (or per bootstrap weight)."""

    n_models: int
    a: NDArray[np.intp]  # (n,)
    b: NDArray[np.intp]  # (n,)
    y: Array  # (n,)
    features: Array | None  # (n, K) standardised
    weight: Array  # (n,)
    l2: float = DEFAULT_L2
    meat_weight: Array | None = None  # (n,) Σ w² per row when rows are merged; else w²

    @property
    def n_style(self) -> int:
        return 0 if self.features is None else self.features.shape[1]

    @property
    def n_params(self) -> int:
        return self.n_models + self.n_style

    @cached_property
    def features_t(self) -> Array:
        """(K, n) contiguous copy of the features: each feature is one fast row to scan."""
        assert self.features is not None
        return np.ascontiguousarray(self.features.T)

    @cached_property
    def pair(self) -> NDArray[np.intp]:
        return self.a * self.n_models + self.b

    def with_weight(self, weight: Array) -> Design:
        """The same battles reweighted (a bootstrap round), sharing the cached structure."""
        reweighted = replace(self, weight=weight, meat_weight=None)
        reweighted.__dict__.update(
            {k: self.__dict__[k] for k in ("features_t", "pair") if k in self.__dict__}
        )
        return reweighted

    def linear_predictor(self, theta: Array) -> Array:
        r = theta[: self.n_models]
        eta = LN10 * (r[self.a] - r[self.b])  # (n,)
        if self.features is not None:
            eta += theta[self.n_models :] @ self.features_t
        return eta


def _value(eta: Array, theta: Array, design: Design) -> float:
    nll = float(np.dot(design.weight, np.logaddexp(0.0, eta) - design.y * eta))
    return nll + 0.5 * design.l2 * float(np.dot(theta, theta))


def objective(theta: Array, design: Design) -> float:
    return _value(design.linear_predictor(theta), theta, design)


def gradient(theta: Array, design: Design) -> Array:
    return _gradient_at(expit(design.linear_predictor(theta)), theta, design)


def hessian(theta: Array, design: Design) -> Array:
    p = expit(design.linear_predictor(theta))
    return _hessian_at(p, design)


def _gradient_at(p: Array, theta: Array, design: Design) -> Array:
    return transpose_times(design.weight * (p - design.y), design) + design.l2 * theta


def _hessian_at(p: Array, design: Design) -> Array:
    return outer_sum(design.weight * p * (1.0 - p), design) + design.l2 * np.eye(design.n_params)


def outer_sum(h: Array, design: Design) -> Array:
    """Σ_i h_i · x_i x_iᵀ, where x_i is battle i's row of the design matrix
    (ln10 at A, −ln10 at B, then the style features). Used for the Hessian (h = w·p·(1−p))
    and the sandwich's meat (h = w·(p−y)²)."""
    m, k = design.n_models, design.n_style
    out = np.empty((m + k, m + k))
    pair = np.bincount(design.pair, weights=h, minlength=m * m).reshape(m, m)
    both = pair + pair.T  # (M, M) weight of battles between each pair, either side
    out[:m, :m] = LN10**2 * (np.diag(both.sum(axis=1)) - both)
    if design.features is not None:
        features = design.features_t  # (K, n)
        for j in range(k):
            hf = h * features[j]  # (n,)
            cross = LN10 * _by_model(hf, design)  # (M,)
            out[:m, m + j] = cross
            out[m + j, :m] = cross
            out[m + j, m:] = features @ hf  # (K,)
    return out


def _by_model(v: Array, design: Design) -> Array:
    """Σ over each model's battles of v, counted + on side A and − on side B."""
    m = design.n_models
    plus = np.bincount(design.a, weights=v, minlength=m).astype(np.float64, copy=False)
    return plus - np.bincount(design.b, weights=v, minlength=m)


def transpose_times(v: Array, design: Design) -> Array:
    """Xᵀ v for the (implicit) design matrix X."""
    by_model = LN10 * _by_model(v, design)
    if design.features is None:
        return by_model
    return np.concatenate([by_model, design.features_t @ v])


class ConvergenceError(RuntimeError):
    """The fit stopped short of the optimum; `theta` is where it stopped, after `iterations`."""

    def __init__(self, message: str, *, theta: Array, iterations: int) -> None:
        super().__init__(message)
        self.theta = theta
        self.iterations = iterations


def newton(
    design: Design, theta0: Array | None = None, *, tol: float = 1e-10, max_iter: int = 100
) -> tuple[Array, int]:
    """Minimise the penalised objective by Newton's method with step halving.

    The objective is strictly convex (the penalty makes the Hessian positive definite), so
    Newton converges quadratically from any start; a warm start from a nearby fit (a refit
    after a few more votes, a bootstrap round) takes two or three steps. Each iteration makes
    one pass over the battles for the linear predictor and one for gradient and Hessian.
    Stops when the largest change of a centred rating or style coefficient is below `tol`.
    Returns (θ, iterations); raises ConvergenceError, carrying the last θ, when it runs out of
    iterations or when no fraction of a Newton step lowers the objective (non-finite data, or
    a step computed from a Hessian so ill-conditioned that it points uphill).
    """
    theta = np.zeros(design.n_params) if theta0 is None else np.array(theta0, dtype=np.float64)
    eta = design.linear_predictor(theta)
    value = _value(eta, theta, design)
    for iteration in range(1, max_iter + 1):
        p = expit(eta)
        step = np.linalg.solve(_hessian_at(p, design), _gradient_at(p, theta, design))
        scale = 1.0
        while True:
            candidate = theta - scale * step
            candidate_eta = design.linear_predictor(candidate)
            candidate_value = _value(candidate_eta, candidate, design)
            if candidate_value <= value + 1e-12 * abs(value):
                break
            if scale == 1.0 and _change(step, design.n_models) < tol:
                break  # a whole step below tolerance: θ has converged and the rise is rounding
            scale *= 0.5
            if scale < 1e-8:
                raise ConvergenceError(
                    f"Newton's step did not lower the objective at iteration {iteration}",
                    theta=theta,
                    iterations=iteration,
                )
        theta, eta, value = candidate, candidate_eta, candidate_value
        if _change(scale * step, design.n_models) < tol:
            return theta, iteration
    raise ConvergenceError(
        f"Newton did not converge in {max_iter} iterations", theta=theta, iterations=max_iter
    )


def chord(
    design: Design,
    theta0: Array,
    hessian_factor: tuple[Array, bool],
    *,
    tol: float,
    max_iter: int = 30,
    single_precision: bool = False,
) -> tuple[Array, int]:
    """Newton steps that all reuse one Hessian (the chord method), for bootstrap rounds.

    `hessian_factor` is the Cholesky factor of the Hessian of the same battles under nearby
    weights — the full data at its optimum `theta0`. The iteration still stops only where the
    gradient of *this* design is zero, so it finds the same optimum as `newton`; it converges
    linearly, at a rate set by how much the two Hessians differ (O(1/√n) for a bootstrap
    resample), and each step costs one gradient: a few passes over the battles, done in
    place because at a million battles memory traffic, not arithmetic, is the cost.
    `single_precision` computes σ in float32 (see `_sigmoid_single`): for tolerances ≥ 1e-7.
    """
    theta = np.array(theta0, dtype=np.float64)
    m = design.n_models
    single = np.empty(len(design.a), dtype=np.float32) if single_precision else None
    for iteration in range(1, max_iter + 1):
        residual = theta[:m][design.a]  # (n,) becomes η, then p, then w·(p − y)
        np.subtract(residual, theta[:m][design.b], out=residual)
        residual *= LN10
        if design.features is not None:
            residual += theta[m:] @ design.features_t
        if single is not None:
            _sigmoid_single(residual, single)
        else:
            expit(residual, out=residual)
        residual -= design.y
        residual *= design.weight
        grad = transpose_times(residual, design) + design.l2 * theta
        step = cho_solve(hessian_factor, grad)
        theta -= step
        if not np.all(np.isfinite(theta)):
            break
        if _change(step, m) < tol:
            return theta, iteration
    raise ConvergenceError(
        f"chord iteration did not converge in {max_iter} steps", theta=theta, iterations=max_iter
    )


def _sigmoid_single(eta: Array, buffer: NDArray[np.float32]) -> None:
    """σ(η) in place, computed in single precision: exp costs a third of double's, the largest
    share of a pass over a million battles. Its relative error (6e-8) puts a noise floor of
    ~1e-9..1e-8 in rating units under the optimum chord can find, far inside the bootstrap's
    tolerance (1e-6); Newton and the objective stay in double."""
    np.negative(eta, out=buffer, casting="same_kind")
    with np.errstate(over="ignore"):  # exp(−η) = inf for η < −88: σ = 1/inf = 0, as it should
        np.exp(buffer, out=buffer)
    buffer += 1.0
    np.reciprocal(buffer, out=buffer)
    np.copyto(eta, buffer)


def _change(step: NDArray[np.floating], n_models: int) -> float:
    """The size of a step as the scores see it: ratings only matter relative to their mean,
    and with a tiny penalty the common offset is so weakly pinned that it drifts at rounding
    level long after everything that matters has converged."""
    ratings = step[:n_models]
    return float(
        max(np.max(np.abs(ratings - ratings.mean())), np.max(np.abs(step[n_models:]), initial=0.0))
    )
