"""The study's analyses over a competition: Spearman ρ between what agents spent, what the
benchmarks measured and what humans preferred, per phase and from phase 1 to phase 2.

Reads the evaluation results (`selectors`), the phases' rating snapshots and the cluster's
GPU ledgers; the statistics themselves are in `correlations` (pure).

Ratings are `1000 + 400·(r − r̄)`, centred on the mean of the models rated *in that phase*, so a
rating from phase 1 and one from phase 2 are on different scales and cannot be subtracted. As
the study does, each agent's rating is first taken relative to the instruct reference rated in
the same phase (`rating − rating(instruct)`), and the phase-1 → phase-2 change is the change of
that. Benchmark progress (gap closed) is already relative to the references and GPU-hours are
absolute: their changes subtract as they are.

An agent with a confirmed rule violation counts with the base model's benchmark results, as
everywhere (`selectors.phase_models`); the report says whose were replaced (`replaced_by_base`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.models import Agent
from arena.competition.models import Competition, Phase
from arena.leaderboard.selectors import global_snapshot_latest, snapshot_latest
from arena.serving.models import Contestant
from cluster.selectors import gpu_seconds_charged
from evalsuite import correlations
from evalsuite.models import EvalRun
from evalsuite.selectors import gap_closed_of, phase_models

# The study's figures, printed next to ours.
STUDY_RHO = {"wildbench_vs_rating": 0.95, "benchmark_change_vs_rating_change": -0.19}


@dataclass(frozen=True)
class PhaseInputs:
    """Per agent-model quantities of one phase, keyed by the contestant's display name."""

    gpu_hours: dict[str, float]
    rating_style: dict[str, float]  # every rated model, the references included
    rating_raw: dict[str, float]
    gap_closed: dict[str, float]  # median gap closed
    benchmarks: dict[str, dict[str, float]]  # benchmark → model → score
    by_agent: dict[str, str]  # display name → agent name, to line phases up
    instruct: str | None  # the instruct reference's name among the rated models
    longer_answer_share: float | None
    # display name -> the confirmed violations for which its benchmark values are the base's
    replaced: dict[str, list[str]] = field(default_factory=dict)

    def agents_only(self, values: dict[str, float]) -> dict[str, float]:
        return {label: v for label, v in values.items() if label in self.by_agent}

    def above_instruct(self, ratings: dict[str, float]) -> dict[str, float]:
        """Each agent model's rating minus the instruct reference's (empty if it was not
        rated in the phase)."""
        if self.instruct is None or self.instruct not in ratings:
            return {}
        return {m: r - ratings[self.instruct] for m, r in self.agents_only(ratings).items()}

    def per_agent(self, values: dict[str, float]) -> dict[str, float]:
        """Re-keyed by agent name, so that phase 1 and phase 2 line up."""
        return {self.by_agent[label]: v for label, v in self.agents_only(values).items()}


def phase_inputs(phase: Phase) -> PhaseInputs:
    """Each agent model's GPU-hours (charged to the agent's cluster account in the phase),
    human ratings (the phase's latest rating snapshot), median gap closed and benchmark scores,
    and the name the instruct reference was rated under."""
    snapshot = snapshot_latest(phase=phase.label) or global_snapshot_latest()
    style = _ratings(snapshot.style if snapshot else None)
    raw = _ratings(snapshot.raw if snapshot else None)
    gpu: dict[str, float] = {}
    gap: dict[str, float] = {}
    by_agent: dict[str, str] = {}
    per_benchmark: dict[str, dict[str, float]] = {}
    replaced: dict[str, list[str]] = {}
    instruct_labels = []
    for model in phase_models(phase):
        if model.role == EvalRun.Role.INSTRUCT:
            instruct_labels.append(model.label)
        if model.role != EvalRun.Role.AGENT or model.agent is None:
            continue
        by_agent[model.label] = model.agent
        if model.replaced is not None:
            replaced[model.label] = model.replaced
        for name, score in model.scores.items():
            per_benchmark.setdefault(name, {})[model.label] = score.value
        value = gap_closed_of(phase.competition, model.scores).median
        if value is not None:
            gap[model.label] = value
        account = (
            Agent.objects.select_related("cluster_account").get(name=model.agent).cluster_account
        )
        if account is not None:
            gpu[model.label] = gpu_seconds_charged(account, period=phase.label) / 3600
    instruct_model = phase.competition.instruct_model
    if instruct_model:
        instruct_labels += Contestant.objects.filter(checkpoint_path=instruct_model).values_list(
            "display_name", flat=True
        )
    rated = style or raw
    instruct = next((label for label in instruct_labels if label in rated), None)
    longer = ((snapshot.analyses or {}).get("longer_answer_wins") or {}) if snapshot else {}
    return PhaseInputs(
        gpu, style, raw, gap, dict(sorted(per_benchmark.items())), by_agent, instruct,
        longer.get("share"), replaced,
    )  # fmt: skip


def _ratings(table: dict[str, Any] | None) -> dict[str, float]:
    return {row["model"]: float(row["score"]) for row in (table or {}).get("scores", [])}


def phase_analyses(got: PhaseInputs, *, rounds: int) -> dict[str, Any]:
    """ρ between agent models' GPU-hours, benchmark progress, each benchmark and the human
    rating in one phase."""

    def rho(x_name: str, x: dict[str, float], y_name: str, y: dict[str, float]) -> dict:
        return correlations.correlate(
            x_name, got.agents_only(x), y_name, got.agents_only(y), rounds=rounds
        ).to_json()

    return {
        "gpu_hours_vs_rating": rho("gpu_hours", got.gpu_hours, "rating_style", got.rating_style),
        "gpu_hours_vs_gap_closed": rho("gpu_hours", got.gpu_hours, "gap_closed", got.gap_closed),
        "gap_closed_vs_rating_style": rho(
            "gap_closed", got.gap_closed, "rating_style", got.rating_style
        ),
        "gap_closed_vs_rating_raw": rho("gap_closed", got.gap_closed, "rating_raw", got.rating_raw),
        "benchmark_vs_rating": {
            name: rho(name, scores, "rating_style", got.rating_style)
            for name, scores in got.benchmarks.items()
        },
        "rating_reference": got.instruct,
        "longer_answer_share": got.longer_answer_share,
        "replaced_by_base": got.replaced,
    }


def phase_change_analyses(one: PhaseInputs, two: PhaseInputs, *, rounds: int) -> dict[str, Any]:
    """ρ between agents' phase-1 → phase-2 changes: benchmark progress vs rating (relative to
    the instruct reference in each phase), GPU-hours vs rating."""
    d_rating = correlations.changes(
        one.per_agent(one.above_instruct(one.rating_style)),
        two.per_agent(two.above_instruct(two.rating_style)),
    )
    d_gap = correlations.changes(one.per_agent(one.gap_closed), two.per_agent(two.gap_closed))
    d_gpu = correlations.changes(one.per_agent(one.gpu_hours), two.per_agent(two.gpu_hours))
    return {
        "rating_style_change": {agent: round(v, 2) for agent, v in d_rating.items()},
        "gap_closed_change_vs_rating_change": correlations.correlate(
            "gap_closed_change", d_gap, "rating_style_change", d_rating, rounds=rounds
        ).to_json(),
        "gpu_hours_change_vs_rating_change": correlations.correlate(
            "gpu_hours_change", d_gpu, "rating_style_change", d_rating, rounds=rounds
        ).to_json(),
        "rating_reference": [one.instruct, two.instruct],
    }


def correlations_report(
    competition: Competition, *, rounds: int = correlations.BOOTSTRAP_ROUNDS
) -> dict[str, Any]:
    """Spearman ρ with bootstrap intervals, per phase and across the first two phases."""
    inputs = {phase.number: (phase, phase_inputs(phase)) for phase in competition.phases.all()}
    report: dict[str, Any] = {
        "phases": {
            phase.label: phase_analyses(got, rounds=rounds)
            for _, (phase, got) in sorted(inputs.items())
        },
        "study": STUDY_RHO,
    }
    if 1 in inputs and 2 in inputs:
        report["phase_changes"] = phase_change_analyses(inputs[1][1], inputs[2][1], rounds=rounds)
    return report
