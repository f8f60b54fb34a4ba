"""Reads for an agent's own evaluations: its on-demand runs with their per-item outputs, and
its Pareto set and post-peak warning over every evaluated checkpoint.

Held-out results never leave here for an agent: a run lists proxy benchmarks only, and the
Pareto set and headlines use proxy scores until the competition has ended (as
`selectors.agent_visible_evals`). The organizer's dashboard asks with held-out included.
"""

from __future__ import annotations

from typing import Any

from agents.models import Agent, Nomination
from evalsuite import metrics
from evalsuite.models import BenchmarkResult, EvalRun
from evalsuite.registry import benchmarks
from evalsuite.replacements import replaced_agents
from evalsuite.selectors import (
    CheckpointHeadlines,
    agent_pareto,
    checkpoint_headlines,
    competition_ended,
    score_json,
)

HELD_OUT = {entry.name for entry in benchmarks() if entry.held_out}
RUNS_LISTED = 100


def held_out_visible(agent: Agent) -> bool:
    run = EvalRun.objects.filter(agent=agent).select_related("phase__competition").first()
    return run is not None and competition_ended(run.phase.competition)


def agent_requested_runs(agent: Agent) -> list[EvalRun]:
    """The agent's on-demand runs, newest first."""
    runs = EvalRun.objects.filter(agent=agent, requested_by_agent=True).select_related("job")
    return list(runs.order_by("-created_at", "-pk")[:RUNS_LISTED])


def agent_requested_run(agent: Agent, run_id: int) -> EvalRun | None:
    return (
        EvalRun.objects.filter(agent=agent, requested_by_agent=True, pk=run_id)
        .select_related("job", "phase")
        .first()
    )


def run_json(run: EvalRun, *, items: bool = False) -> dict[str, Any]:
    """A run as its agent sees it: proxy benchmarks only, each score with its standard error
    and item count, and (with `items`) every item's value, answer and the scorer's note."""
    results = BenchmarkResult.objects.filter(run=run, held_out=False).exclude(
        benchmark__in=HELD_OUT
    )
    shown = []
    for result in results.order_by("benchmark"):
        entry: dict[str, Any] = {
            "benchmark": result.benchmark,
            "domain": result.domain,
            **(
                score_json(metrics.Score(result.score, result.stderr, result.n))
                if result.score is not None
                else {"score": None, "stderr": None, "n": result.n}
            ),
            "error": result.error,
        }
        if items:
            entry["items"] = [
                {"item_id": i.item_id, "value": i.value, "answer": i.answer,
                 "explanation": i.explanation}
                for i in result.items.all()
            ]  # fmt: skip
        shown.append(entry)
    return {
        "id": run.pk,
        "checkpoint": run.checkpoint_id,
        "phase": run.phase.label,
        "state": run.state,
        "benchmarks": [name for name in run.benchmarks if name not in HELD_OUT],
        "job": run.job.scheduler_id if run.job else None,
        "error": run.error,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "results": shown,
    }


def agent_progress(agent: Agent, *, include_held_out: bool) -> dict[str, Any]:
    """The agent's Pareto set over its evaluated checkpoints (per-domain capability scores)
    and its post-peak warning: the checkpoint it stands by (its latest nomination, else the
    latest checkpoint evaluated) measurably below an earlier one by headline."""
    run = EvalRun.objects.filter(agent=agent).select_related("phase__competition").first()
    rules = replaced_agents(run.phase if run else None).get(agent.name)
    if rules:  # its results are the base model's everywhere: its own progress counts for nothing
        return {
            "held_out_included": include_held_out,
            "pareto": [],
            "domains": {},
            "headlines": {},
            "without_headline": {},
            "chosen": None,
            "chosen_is_nominated": False,
            "post_peak": None,
            "measurable_z": metrics.MEASURABLE_Z,
            "replaced_by_base": {"confirmed_violations": rules},
        }
    pareto = agent_pareto(agent, include_held_out=include_held_out)
    headlines = (
        checkpoint_headlines(agent, run.phase.competition, include_held_out=include_held_out)
        if run is not None
        else CheckpointHeadlines([], [], {}, {})
    )
    history = headlines.history
    nominated = (
        Nomination.objects.filter(agent=agent)
        .order_by("-phase__number", "-updated_at")
        .values_list("checkpoint_id", flat=True)
        .first()
    )
    keys = headlines.evaluated  # a checkpoint without a headline may still be the one chosen
    chosen = str(nominated) if str(nominated) in keys else (keys[-1] if keys else None)
    warning = headlines.post_peak(chosen) if chosen else None
    return {
        "held_out_included": include_held_out,
        "pareto": pareto["pareto"],
        "domains": pareto["vectors"],
        "headlines": {key: score_json(value) for key, value in history},
        "without_headline": headlines.without,
        "chosen": chosen,
        "chosen_is_nominated": chosen is not None and chosen == str(nominated),
        "post_peak": None
        if warning is None
        else {
            "chosen": warning.nominated,
            "score": score_json(warning.nominated_score),
            "best": warning.best,
            "best_score": score_json(warning.best_score),
            "drop": round(warning.drop, 4),
            "drop_stderr": None if warning.drop_stderr is None else round(warning.drop_stderr, 4),
        },
        "measurable_z": metrics.MEASURABLE_Z,
        "replaced_by_base": None,
    }
