"""`evals report` as a person reads it: the benchmark table with score ± standard error, item
count and judge, gap closed, safety against base, post-peak warnings and the correlations.

Plain functions from the report dicts (`selectors.phase_report`, `analyses.correlations_report`)
to lines of text; `--json` prints the dicts themselves.
"""

from __future__ import annotations

from typing import Any

from evalsuite.metrics import MEASURABLE_Z, NO_QUALIFYING


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
        if model.get("replaced_by_base"):
            lines.append(f"  {replaced_words(model['replaced_by_base'])}")
        for name, cell in model["scores"].items():
            judge = f"  judge {cell['judge_model']}" if cell.get("judge_model") else ""
            lines.append(f"  {name:<16} {_pm(cell['score'], cell['stderr']):>16}"
                         f"  n={cell['n']}{judge}")  # fmt: skip
            for part, value in cell.get("metrics", {}).items():
                lines.append(f"    {part:<22} {_pm(value['score'], value['stderr']):>16}"
                             f"  n={value['n']}")  # fmt: skip
        gap = model.get("gap_closed")
        if gap is not None:
            lines += gap_lines(gap, model.get("headline"))
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


def headline_words(gap: dict[str, Any], headline: dict[str, Any] | None, *, digits: int = 3) -> str:
    """The headline as a report shows it: median gap closed ± se, or why there is none (never
    a mean score in its place)."""
    if gap["median"] is None:
        return gap.get("no_median") or NO_QUALIFYING
    stderr = (headline or {}).get("stderr")
    return f"{gap['median']:+.2f}" + (f" ± {stderr:.{digits}f}" if stderr is not None else " ± ?")


def excluded_words(gap: dict[str, Any]) -> str:
    """Each benchmark left out of gap closed, with its reason."""
    reasons = gap.get("excluded_reasons") or {}
    return "; ".join(f"{name} ({reasons[name]})" if name in reasons else name
                     for name in gap["excluded"]) or "none"  # fmt: skip


def gap_lines(gap: dict[str, Any], headline: dict[str, Any] | None) -> list[str]:
    """The headline line and the benchmarks left out, each with why."""
    counted = (
        f"median {headline_words(gap, headline)} over"
        f" {', '.join(gap['per_benchmark'])} (instruct above base by more than {MEASURABLE_Z}·se)"
        if gap["median"] is not None
        else headline_words(gap, headline)
    )
    return [f"  gap closed: {counted}", f"  left out of gap closed: {excluded_words(gap)}"]


def replaced_words(replaced: dict[str, Any]) -> str:
    """What a report says beside results that are the base model's (`replaced_by_base`)."""
    rules = ", ".join(replaced["confirmed_violations"])
    return f"results replaced by the base model's: confirmed violation ({rules})"


def _signed(value: float, stderr: float | None) -> str:
    return f"{value:+.3f}" + (f" ± {stderr:.3f}" if stderr is not None else "")


CORRELATION_COLUMNS = ["phase", "between", "ρ", "95% bootstrap interval", "models"]
PER_PHASE = ("gpu_hours_vs_rating", "gpu_hours_vs_gap_closed", "gap_closed_vs_rating_style",
             "gap_closed_vs_rating_raw")  # fmt: skip
PHASE_CHANGES = ("gap_closed_change_vs_rating_change", "gpu_hours_change_vs_rating_change")


def _rho_cells(value: dict[str, Any]) -> list[str]:
    rho = value.get("rho")
    low, high = value.get("ci") or [None, None]
    interval = f"[{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else ""
    return ["" if rho is None else f"{rho:+.2f}", interval, str(value.get("n", ""))]


def correlation_rows(report: dict[str, Any]) -> list[list[str]]:
    """The correlations report as table rows (`CORRELATION_COLUMNS`); ρ blank when it cannot
    be computed (fewer than three models, or no spread)."""
    rows = []
    for label, measures in report["phases"].items():
        for name in PER_PHASE:
            rows.append([label, name.replace("_", " "), *_rho_cells(measures[name])])
        for benchmark, value in measures["benchmark_vs_rating"].items():
            rows.append([label, f"{benchmark} vs rating style", *_rho_cells(value)])
        if measures["longer_answer_share"] is not None:
            share = measures["longer_answer_share"]
            rows.append([label, "decisive votes won by the longer answer", f"{share:.0%}", "", ""])
    changes = report.get("phase_changes")
    if changes:
        for name in PHASE_CHANGES:
            rows.append(["phase 1 → 2", name.replace("_", " "), *_rho_cells(changes[name])])
    return rows


def correlation_note(report: dict[str, Any]) -> str:
    study = report["study"]
    references = ", ".join(
        f"{label}: {measures['rating_reference'] or 'not rated'}"
        for label, measures in report["phases"].items()
    )
    replaced = sorted(
        {f"{label} ({', '.join(rules)})" for measures in report["phases"].values()
         for label, rules in measures.get("replaced_by_base", {}).items()}
    )  # fmt: skip
    moved = ", ".join(
        f"{agent} {value:+.0f}"
        for agent, value in (report.get("phase_changes") or {})
        .get("rating_style_change", {})
        .items()
    )
    return (
        "Agent models only. Rating changes are each agent's rating minus the instruct"
        f" reference's in the same phase ({references}), phase 2 minus phase 1"
        + (f": {moved}" if moved else "")
        + (
            ". Benchmark values replaced by the base model's (confirmed violation): "
            + "; ".join(replaced)
            if replaced
            else ""
        )
        + f". The study: WildBench vs rating ρ = {study['wildbench_vs_rating']:+.2f}; benchmark"
        f" change vs rating change ρ = {study['benchmark_change_vs_rating_change']:+.2f}."
    )


def correlation_lines(report: dict[str, Any]) -> list[str]:
    lines = ["# Correlations (Spearman ρ, 95% bootstrap interval)", ""]
    for phase, between, rho, interval, n in correlation_rows(report):
        correlation = f"ρ {rho} {interval} (n={n})" if rho else f"ρ n/a (n={n})"
        shown = rho if n == "" else correlation  # n is blank on the longer-answer share
        lines.append(f"  {phase:<12} {between:<40} {shown}")
    return [*lines, "", correlation_note(report)]
