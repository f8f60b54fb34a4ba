"""The organizer dashboard's section on each agent's own evaluations (the hook in
`organizer.py`): its Pareto set over every evaluated checkpoint, the checkpoint it stands by,
and its post-peak warning, held-out benchmarks included."""

from __future__ import annotations

from typing import Any

from agents.models import Agent
from evalsuite.agent_progress import agent_progress
from evalsuite.models import EvalRun
from frontend.organizer import OrganizerSection


def agent_progress_sections() -> list[OrganizerSection]:
    agents = Agent.objects.filter(
        pk__in=EvalRun.objects.filter(checkpoint__isnull=False).values_list("agent_id", flat=True)
    ).order_by("name")
    rows = [_row(agent.name, agent_progress(agent, include_held_out=True)) for agent in agents]
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
        str(len(progress["headlines"])),
        ", ".join(progress["pareto"]) or "-",
        "-"
        if chosen is None
        else chosen + (" (nominated)" if progress["chosen_is_nominated"] else ""),
        "-" if headline is None else _plus_minus(headline),
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
