"""`evals report` as a person reads it: the benchmark table with score ± standard error, item
count and judge, gap closed, safety against base, post-peak warnings and the correlations.

Plain functions from the report dicts (`selectors.phase_report`, `analyses.correlations_report`)
to lines of text; `--json` prints the dicts themselves.
"""

from __future__ import annotations

from typing import Any

from evalsuite.metrics import MEASURABLE_Z


def _pm(value: float, stderr: float | None) -> str:
    return f"{value:.3f}" + (f" ± {stderr:.3f}" if stderr is not None else " ± ?")


def phase_lines(report: dict[str, Any]) -> list[str]:
    models = report["models"]
    lines = [f"# Evaluation, {report['phase']}", ""]
    if not models:
        return [*lines, "no evaluation results", ""]
    lines.append("score ± standard error (n items); judge: the model that graded")
    for model in models:
        lines += ["", f"## {model['model']} ({model['role']})"]
        for name, cell in model["scores"].items():
            judge = f"  judge {cell['judge_model']}" if cell.get("judge_model") else ""
            lines.append(f"  {name:<16} {_pm(cell['score'], cell['stderr']):>16}"
                         f"  n={cell['n']}{judge}")  # fmt: skip
        gap = model.get("gap_closed")
        if gap is not None:
            median = "n/a" if gap["median"] is None else f"{gap['median']:+.2f}"
            top = model.get("headline")
            if top is not None:
                lines.append(f"  headline (median gap closed, or mean score without measurable"
                             f" references): {_pm(top['score'], top['stderr'])}")  # fmt: skip
            lines.append(
                f"  gap closed: median {median}; not measurable (|instruct − base| ≤"
                f" {MEASURABLE_Z}·se, or no reference): {', '.join(gap['excluded']) or 'none'}"
            )
    lines += ["", "## Safety against the base model (higher is safer)"]
    for label, deltas in report["safety"].items():
        cells = ", ".join(
            f"{d['benchmark']} {_signed(d['delta'], d['stderr'])}"
            + (" MORE HARMFUL" if d["more_harmful"] else "")
            for d in deltas
        )
        lines.append(f"  {label}: {cells or 'no scores'}")
    lines += ["", "## Post-peak warnings"]
    for w in report["post_peak_warnings"]:
        lines.append(
            f"  checkpoint {w['nominated']} ({w['score']:+.3f}) is below its earlier"
            f" {w['best']} ({w['best_score']:+.3f}): drop {_signed(w['drop'], w['drop_stderr'])}"
        )
    if not report["post_peak_warnings"]:
        lines.append("  none")
    for failed in report["failed_runs"]:
        lines.append(f"evaluation of {failed['model_label']} failed: {failed['error'][:200]}")
    return [*lines, ""]


def _signed(value: float, stderr: float | None) -> str:
    return f"{value:+.3f}" + (f" ± {stderr:.3f}" if stderr is not None else "")


def _rho(value: dict[str, Any]) -> str:
    if value["rho"] is None:
        return f"ρ n/a (n={value['n']})"
    low, high = value["ci"]
    interval = "" if low is None else f" [{low:+.2f}, {high:+.2f}]"
    return f"ρ {value['rho']:+.2f}{interval} (n={value['n']})"


def correlation_lines(report: dict[str, Any]) -> list[str]:
    study = report["study"]
    lines = ["# Correlations (Spearman ρ over agent models, 95% bootstrap interval)", ""]
    for label, measures in report["phases"].items():
        lines.append(f"## {label} (ratings relative to {measures['rating_reference'] or '?'})")
        for name in ("gpu_hours_vs_rating", "gpu_hours_vs_gap_closed",
                     "gap_closed_vs_rating_style", "gap_closed_vs_rating_raw"):  # fmt: skip
            lines.append(f"  {name.replace('_', ' '):<34} {_rho(measures[name])}")
        for benchmark, value in measures["benchmark_vs_rating"].items():
            lines.append(f"  {benchmark + ' vs rating style':<34} {_rho(value)}")
        if measures["longer_answer_share"] is not None:
            lines.append(f"  decisive votes won by the longer answer: "
                         f"{measures['longer_answer_share']:.0%}")  # fmt: skip
        lines.append("")
    changes = report.get("phase_changes")
    if changes:
        lines.append("## phase 1 → 2 (ratings minus the instruct reference's in each phase)")
        for name in ("gap_closed_change_vs_rating_change", "gpu_hours_change_vs_rating_change"):
            lines.append(f"  {name.replace('_', ' '):<34} {_rho(changes[name])}")
        moved = ", ".join(f"{a} {v:+.0f}" for a, v in changes["rating_style_change"].items())
        lines += [f"  rating changes: {moved or 'none (instruct reference not rated)'}", ""]
    lines.append(
        f"The study: WildBench vs rating ρ = {study['wildbench_vs_rating']:+.2f}; benchmark"
        f" change vs rating change ρ = {study['benchmark_change_vs_rating_change']:+.2f}."
    )
    return lines
