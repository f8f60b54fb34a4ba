"""The organizer's sections on each agent's own evaluations (the hooks in `organizer.py`):
its Pareto set over every evaluated checkpoint, the checkpoint it stands by, and its post-peak
warning, held-out benchmarks included; and the agents' latest on-demand
runs with their state (a run its agent cancelled shows as cancelled) and what their jobs
were charged."""

from __future__ import annotations

from typing import Any

from evalsuite.agent_progress import agent_progress
from evalsuite.selectors import agents_with_evaluated_checkpoints, on_demand_runs_latest
from frontend.organizer import OrganizerSection

RUNS_SHOWN = 50


def agent_progress_sections(*, agent: str | None = None) -> list[OrganizerSection]:
    """Every agent's progress, or only `agent`'s."""
    agents = agents_with_evaluated_checkpoints(names=None if agent is None else [agent])
    rows = [_row(each.name, agent_progress(each, include_held_out=True)) for each in agents]
    if not rows:
        return []
    return [
        OrganizerSection(
            title="Agents' checkpoints: Pareto sets and post-peak warnings",
            columns=[
                "agent",
                "checkpoints evaluated",
                "Pareto set",
                "stands by",
                "headline (gap closed ± se)",
                "post-peak warning",
            ],  # fmt: skip
            rows=rows,
            note="Over every evaluated checkpoint of the agent (its own on-demand runs and the "
            "phases' evaluations), held-out benchmarks included. A checkpoint is in the Pareto "
            "set when no other is at least as good in every domain and measurably better in "
            "one; 'stands by' is its latest nomination, else its latest evaluated checkpoint.",
        )
    ]


def _row(name: str, progress: dict[str, Any]) -> list[str]:
    chosen = progress["chosen"]
    headline = progress["headlines"].get(chosen) if chosen else None
    warning = progress["post_peak"]
    return [
        name,
        str(len(progress["headlines"]) + len(progress["without_headline"])),
        ", ".join(progress["pareto"]) or "-",
        "-"
        if chosen is None
        else chosen + (" (nominated)" if progress["chosen_is_nominated"] else ""),
        # the chosen checkpoint has no headline: say why (no benchmark where instruct beats base)
        progress["without_headline"].get(chosen, "-")
        if headline is None
        else _plus_minus(headline),
        "-"
        if warning is None
        else f"{warning['chosen']} is below its earlier {warning['best']}"
        f" (drop {warning['drop']:.2f}"
        + ("" if warning["drop_stderr"] is None else f" ± {warning['drop_stderr']:.2f}")
        + ")",
    ]


def _plus_minus(score: dict[str, Any]) -> str:
    stderr = "" if score["stderr"] is None else f" ± {score['stderr']:.2f}"
    return f"{score['score']:.2f}{stderr}"


def on_demand_run_sections(*, agent: str | None = None) -> list[OrganizerSection]:
    """The latest runs of every agent, or only `agent`'s."""
    runs = on_demand_runs_latest(limit=RUNS_SHOWN, agent=agent)
    rows = [
        [
            str(run.pk),
            run.agent.name if run.agent else "-",
            str(run.checkpoint_id or "-"),
            ", ".join(run.benchmarks),
            run.state,
            run.job.scheduler_id if run.job else "-",
            "-"
            if run.job is None
            else f"{run.job.state}, {run.job.gpu_seconds_charged / 3600:.2f} GPU-h",
            run.error[:120],
        ]
        for run in runs
    ]
    if not rows:
        return []
    return [
        OrganizerSection(
            title="Agents' on-demand evaluation runs",
            columns=[
                "run",
                "agent",
                "checkpoint",
                "benchmarks",
                "state",
                "job",
                "job state, charged",
                "note",
            ],  # fmt: skip
            rows=rows,
            note=f"The latest {RUNS_SHOWN}, newest first. 'cancelled' is a run its agent "
            "cancelled; its job's GPU-hours up to then are charged to the agent's account.",
        )
    ]
