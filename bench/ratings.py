"""Rating fit benchmark: our Newton/chord fitter against a plain L-BFGS-B reference.

Generates N battles (default 1,000,000) among M models (default 100) with known ratings and
style effects, then, each in its own process so peak memory is its own:

- ours: the style-controlled fit with R bootstrap rounds (default 100), and again with
  sandwich intervals — `arena.rating.fit_ratings`, exactly as the leaderboard calls it;
- reference: what a user would write — scipy's L-BFGS-B at its default tolerances on the
  unaggregated rows through a sparse design matrix, with the analytic gradient, the same
  penalised objective and standardised features, one fit from scratch per bootstrap round
  on the same resampled rows.

Prints the largest score difference between the two (point scores and interval bounds),
each one's wall time and peak resident memory, the reference's iterations and whether all
its fits converged, and the speed ratio. Targets (DESIGN.md §6): within 1 point, at least
10x faster, under 4 GB; exits with status 1 when one is missed.

Run: `.venv/bin/python bench/ratings.py [--battles N] [--models M] [--rounds R] [--seed S]`
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena.rating import fit_ratings  # noqa: E402
from arena.rating.fit import design_of  # noqa: E402
from arena.rating.model import LN10  # noqa: E402
from arena.rating.synthetic import synthetic_battles  # noqa: E402


def make_data(args: argparse.Namespace):
    return synthetic_battles(
        n_battles=args.battles,
        n_models=args.models,
        seed=args.seed,
        verbose_models=args.models // 10,
    )


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    battles, truth = make_data(args)
    started = time.perf_counter()
    boot = fit_ratings(battles, ci="bootstrap", bootstrap_rounds=args.rounds, seed=args.seed)
    boot_s = time.perf_counter() - started
    started = time.perf_counter()
    sandwich = fit_ratings(battles, ci="sandwich")
    sandwich_s = time.perf_counter() - started
    order = battles.models
    return {
        "boot_s": boot_s,
        "sandwich_s": sandwich_s,
        "score": np.array([boot.score_of(m).score for m in order]),
        "low": np.array([boot.score_of(m).ci_low for m in order]),
        "high": np.array([boot.score_of(m).ci_high for m in order]),
        "truth": truth.scores,
        "sandwich_low": np.array([sandwich.score_of(m).ci_low for m in order]),
        "sandwich_high": np.array([sandwich.score_of(m).ci_high for m in order]),
        "peak_mb": _peak_mb(),
    }


def run_reference(args: argparse.Namespace) -> dict[str, Any]:
    import scipy.sparse as sp
    from scipy.optimize import minimize
    from scipy.special import expit

    battles, _ = make_data(args)
    started = time.perf_counter()
    design = design_of(battles, style=True)  # the same standardised features and penalty
    n, m = len(battles.a), battles.n_models
    rows = np.concatenate([np.arange(n), np.arange(n)])
    cols = np.concatenate([battles.a, battles.b])
    values = np.concatenate([np.full(n, LN10), np.full(n, -LN10)])
    X = sp.hstack(
        [sp.csr_matrix((values, (rows, cols)), shape=(n, m)), sp.csr_matrix(design.features)]
    ).tocsr()
    y, l2 = battles.outcome, design.l2

    iterations, converged, messages = 0, 0, set()

    def fit(X_: sp.csr_matrix, y_: np.ndarray) -> np.ndarray:
        # The summed log-loss plus ½·λ·‖θ‖², exactly our objective, written as Chatbot Arena's
        # own style-control code writes it (FastChat's `contextual_bt_loss_and_grad` sums
        # over battles), with its analytic gradient, and scipy's default L-BFGS-B stopping
        # rules: `ftol` is relative to the loss once it exceeds 1, so it stops a sum about
        # where it would stop a mean; `gtol` (absolute) is the stricter of the two on a sum.
        def value_and_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
            eta = X_ @ theta
            value = float(np.sum(np.logaddexp(0.0, eta) - y_ * eta)) + 0.5 * l2 * float(
                theta @ theta
            )
            return value, X_.T @ (expit(eta) - y_) + l2 * theta

        nonlocal iterations, converged
        result = minimize(value_and_gradient, np.zeros(X_.shape[1]), jac=True, method="L-BFGS-B")
        iterations += result.nit
        converged += bool(result.success)
        messages.add(str(result.message))
        return 1000 + 400 * (result.x[:m] - result.x[:m].mean())

    point = fit(X, y)
    rng = np.random.default_rng(args.seed)  # the same resamples as ours draws
    rounds = np.empty((args.rounds, m))
    for i in range(args.rounds):
        index = rng.integers(0, n, size=n)
        rounds[i] = fit(X[index], y[index])
    low, high = np.quantile(rounds, [0.025, 0.975], axis=0)
    return {
        "boot_s": time.perf_counter() - started,
        "score": point,
        "low": low,
        "high": high,
        "fits": args.rounds + 1,
        "iterations": iterations,
        "converged": converged,
        "messages": sorted(messages),
        "peak_mb": _peak_mb(),
    }


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def in_own_process(function, args: argparse.Namespace) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(function, args).result()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"{args.battles:,} battles, {args.models} models, {args.rounds} bootstrap rounds, seed {args.seed}"
    )
    print("ours: Newton + chord bootstrap ...", flush=True)
    ours = in_own_process(run_ours, args)
    print(
        f"  bootstrap fit {ours['boot_s']:.1f} s, sandwich fit {ours['sandwich_s']:.1f} s, peak {ours['peak_mb']:.0f} MB"
    )
    print("reference: L-BFGS-B, one fit per round ...", flush=True)
    reference = in_own_process(run_reference, args)
    print(f"  bootstrap fit {reference['boot_s']:.1f} s, peak {reference['peak_mb']:.0f} MB")
    print(
        f"  {reference['fits']} fits, {reference['iterations']:,} L-BFGS-B iterations in all, "
        f"{reference['converged']} of {reference['fits']} converged "
        f"({'; '.join(reference['messages'])})"
    )

    score_diff = float(np.max(np.abs(ours["score"] - reference["score"])))
    bound_diff = float(
        max(
            np.max(np.abs(ours["low"] - reference["low"])),
            np.max(np.abs(ours["high"] - reference["high"])),
        )
    )
    ours_total = ours["boot_s"] + ours["sandwich_s"]
    ratio = reference["boot_s"] / ours_total
    truth_error = float(np.max(np.abs(ours["score"] - ours["truth"])))
    peak = max(ours["peak_mb"], reference["peak_mb"])
    targets = {
        "scores within 1 point": score_diff < 1.0,
        "at least 10x faster": ratio >= 10.0,
        "ours under 4 GB": ours["peak_mb"] < 4096,
        "every reference fit converged": reference["converged"] == reference["fits"],
    }
    print()
    print(f"max |score difference| (point)        {score_diff:.4f} points   (target < 1)")
    print(f"max |interval bound difference|       {bound_diff:.4f} points")
    print(f"max |score - true score| (ours)       {truth_error:.2f} points")
    print(
        f"wall time: ours {ours['boot_s']:.1f} s bootstrap + {ours['sandwich_s']:.1f} s "
        f"sandwich, reference {reference['boot_s']:.1f} s"
    )
    print(
        "speed ratio (reference / ours, bootstrap only)      "
        f"{reference['boot_s'] / ours['boot_s']:.1f}x"
    )
    print(f"speed ratio (reference / ours, bootstrap+sandwich)  {ratio:.1f}x   (target >= 10)")
    print(
        f"peak memory: ours {ours['peak_mb']:.0f} MB, reference {reference['peak_mb']:.0f} MB"
        f" (largest {peak:.0f} MB)   (target < 4096)"
    )
    print()
    for name, met in targets.items():
        print(f"{'met   ' if met else 'MISSED'} {name}")
    if not all(targets.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
