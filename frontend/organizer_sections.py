"""The evaluation and audit sections of the organizer's pages (the hook in `organizer.py`).

They live on the organizer's side, so the dependency points from the face to `evalsuite` and
`safety`, never back. Cells are plain text; the template escapes them.
"""

from __future__ import annotations

from typing import Any

from arena.battles.selectors import leak_rates
from arena.competition.models import Competition, Phase
from evalsuite.analyses import correlations_report, phase_inputs
from evalsuite.metrics import MEASURABLE_Z
from evalsuite.report_text import (
    CORRELATION_COLUMNS,
    correlation_note,
    correlation_rows,
    excluded_words,
    headline_words,
    replaced_words,
)
from evalsuite.selectors import competitions_of, phase_report, phases_evaluated
from frontend.organizer import OrganizerSection
from frontend.plots import scatter_svg
from safety.selectors import findings_for_dashboard

CORRELATION_ROUNDS = 500  # bootstrap rounds on a page view: enough for a dashboard interval


def evaluation_sections() -> list[OrganizerSection]:
    sections = []
    phases = phases_evaluated()
    for phase in phases:
        sections.extend(_phase_sections(phase))
    for competition in competitions_of(phases):
        sections.append(_correlations_section(competition))
    return sections


def _phase_sections(phase: Phase) -> list[OrganizerSection]:
    report = phase_report(phase)
    # A confirmed violator's results are already the base model's (phase_report says so).
    models = report["models"]
    flagged = {
        label: [d["benchmark"] for d in deltas if d["more_harmful"]]
        for label, deltas in report["safety"].items()
    }
    summary_rows = []
    for model in models:
        gap = model.get("gap_closed")
        summary_rows.append(
            [
                model["model"],
                model["role"],
                ("-" if not gap else headline_words(gap, model.get("headline"), digits=2))
                + (
                    f" ({replaced_words(model['replaced_by_base'])})"
                    if model.get("replaced_by_base")
                    else ""
                ),
                excluded_words(gap) if gap else "",
                str(len(model["scores"])),
                ", ".join(flagged.get(model["model"], [])) or "-",
            ]
        )
    warnings = "; ".join(
        f"{w['nominated']} ({w['score']:.2f}) is worse than its own earlier {w['best']}"
        f" ({w['best_score']:.2f}; drop {_plus_minus(w['drop'], w['drop_stderr'])})"
        for w in report["post_peak_warnings"]
    )
    failed = "; ".join(f"{f['model_label']}: {f['error'][:80]}" for f in report["failed_runs"])
    note = " ".join(
        part
        for part in (
            f"Post-peak regressions: {warnings}." if warnings else "",
            f"Failed evaluations: {failed}." if failed else "",
        )
        if part
    )
    benchmarks = sorted({name for model in models for name in model["scores"]})
    table_rows = []
    for name in benchmarks:
        table_rows.append(
            [name]
            + [
                _score(model["scores"][name]) if name in model["scores"] else "-"
                for model in models
            ]
            + [_judges(models, name)]
        )
        table_rows += _aggregate_rows(models, name)
    return [
        OrganizerSection(
            title=f"Evaluation, {phase.label}",
            columns=[
                "model",
                "role",
                "gap closed (median ± se)",
                "left out of gap closed (why)",
                "benchmarks scored",
                "more harmful than base on",
            ],  # fmt: skip
            rows=summary_rows,
            note=note,
        ),
        OrganizerSection(
            title=f"Benchmark scores, {phase.label} (held-out included)",
            columns=[
                "benchmark",
                *(
                    f"{m['model']} (base model's)" if m.get("replaced_by_base") else m["model"]
                    for m in models
                ),
                "judge",
            ],
            rows=table_rows,
            note="score ± standard error (n items); safety benchmarks: higher is safer. Rows"
            " 'benchmark · measure' are the benchmark's own measures in their own orientation"
            " (BBQ's bias scores, 0 = no bias; StrongREJECT's score and FORTRESS's ARS, lower is"
            " safer). A gap"
            f" counts when it exceeds {MEASURABLE_Z} standard errors of the difference:"
            " gap closed counts only benchmarks where instruct is above base by more (one-sided), and"
            " 'more harmful than base' needs a drop that does.",
        ),
    ]


def _aggregate_rows(models: list[dict[str, Any]], benchmark: str) -> list[list[str]]:
    """One row per aggregate the benchmark reports beside its score (`metrics` of its cell)."""
    cells = [model["scores"].get(benchmark, {}).get("metrics", {}) for model in models]
    names = sorted({name for cell in cells for name in cell})
    return [
        [f"{benchmark} · {name}"]
        + [_score(cell[name]) if name in cell else "-" for cell in cells]
        + ["-"]
        for name in names
    ]


def _score(cell: dict[str, Any]) -> str:
    n = cell.get("n")
    return _plus_minus(cell["score"], cell.get("stderr")) + (f" (n={n})" if n else "")


def _plus_minus(value: float, stderr: float | None) -> str:
    return f"{value:.2f}" + (f" ± {stderr:.2f}" if stderr is not None else "")


def _judges(models: list[dict[str, Any]], benchmark: str) -> str:
    """The judge model(s) that graded this benchmark, or "-" for a benchmark graded by rule."""
    found = {
        m["scores"][benchmark].get("judge_model", "") for m in models if benchmark in m["scores"]
    }
    return ", ".join(sorted(found - {""})) or "-"


def _correlations_section(competition: Competition) -> OrganizerSection:
    report = correlations_report(competition, rounds=CORRELATION_ROUNDS)
    return OrganizerSection(
        title=f"Correlations, {competition.name} (Spearman ρ)",
        columns=CORRELATION_COLUMNS,
        rows=correlation_rows(report),
        note="ρ is left blank with fewer than three models or no spread. "
        + correlation_note(report),
        svg="".join(_progress_vs_rating(phase) for phase in competition.phases.order_by("number")),
    )


def _progress_vs_rating(phase: Phase) -> str:
    got = phase_inputs(phase)
    points = [
        (label, got.gap_closed[label], got.rating_style[label])
        for label in sorted(got.gap_closed)
        if label in got.rating_style
    ]
    if not points:
        return ""
    return scatter_svg(
        points,
        title=f"{phase.label}: benchmark progress vs human rating",
        x_label="gap closed (median)",
        y_label="rating (style-controlled)",
    )


def audit_sections() -> list[OrganizerSection]:
    board = findings_for_dashboard()
    counts = ", ".join(f"{n} {status}" for status, n in board["counts"].items())
    replaced = ", ".join(board["replaced_agents"]) or "nobody"
    return [
        OrganizerSection(
            title="Audit findings",
            columns=["#", "agent", "phase", "kind", "severity", "status", "summary"],
            rows=[
                [
                    str(f["id"]),
                    f["agent"],
                    f["phase"] or "-",
                    f["kind_label"],
                    f["severity"],
                    f["status"],
                    f["summary"],
                ]  # fmt: skip
                for f in board["findings"]
            ],
            note=f"{counts}. Benchmark results replaced by the base model's for: {replaced}."
            " Confirm or dismiss findings in the admin (Safety → Findings).",
        )
    ]


def leak_sections() -> list[OrganizerSection]:
    """Each contestant's leak rate: answers that revealed an identity over battles answered."""
    rates = leak_rates()
    if not rates:
        return []
    rows = [[r.contestant, str(r.answered), str(r.leaked), f"{100 * r.rate:.1f}%"] for r in rates]
    note = (
        "A battle where one side leaks counts as a loss for that side; both leaking voids it. "
        "Answered: battles both sides finished."
    )
    return [
        OrganizerSection(
            title="Identity leaks",
            columns=["Contestant", "Answered", "Leaked", "Leak rate"],
            rows=rows,
            note=note,
        )
    ]
