"""The feedback part of the agent API (`/api/v1/votes`, `/api/v1/leaderboard`): what the
phase's feedback policy gives the calling agent about its own model, and nothing else."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from agents.api import agent_api, error
from agents.models import Agent
from arena.competition.models import Phase
from arena.leaderboard.services import (
    CategoryBeingComputed,
    CategoryTooSmall,
    CategoryUnknown,
    category_check,
    category_leaderboard,
)
from arena.phases.selectors import (
    comparison_records,
    feedback_phase_for,
    own_battles,
    own_model_name,
    phase_leaderboard,
)


def _feedback_phase(request: HttpRequest, agent: Agent) -> Phase | JsonResponse:
    label = request.GET.get("phase") or None
    phase = feedback_phase_for(agent_id=agent.pk, label=label)
    if phase is None:
        which = f"of {label}" if label else "yet"
        return error(
            403,
            f"no votes {which} for you: the feedback policy gives each agent the battles of its"
            " own model at the start of the next phase",
            "no_feedback",
        )
    return phase


@agent_api("GET")
def votes(request: HttpRequest, agent: Agent) -> JsonResponse:
    phase = _feedback_phase(request, agent)
    if isinstance(phase, JsonResponse):
        return phase
    own_model = own_model_name(agent_id=agent.pk, phase=phase)
    rows = own_battles(agent_id=agent.pk, phase=phase)
    return JsonResponse(
        {
            "phase": phase.label,
            "own_model": own_model,
            "battles": rows,
            "comparisons": comparison_records(rows, own_model) if own_model else [],
        }
    )


@agent_api("GET")
def leaderboard(request: HttpRequest, agent: Agent) -> JsonResponse:
    category = request.GET.get("category", "")
    if category:
        try:
            category_check(category)
        except CategoryUnknown as exc:
            return error(400, str(exc), "unknown_category")
    phase = _feedback_phase(request, agent)
    if isinstance(phase, JsonResponse):
        return phase
    if category:
        try:
            snapshot = category_leaderboard(category=category, phase=phase.label)
        except CategoryTooSmall as exc:
            return error(404, str(exc), "too_few_battles")
        except CategoryBeingComputed as exc:
            return error(503, str(exc), "being_computed")
        table = phase_leaderboard(phase, snapshot=snapshot)
    else:
        table = phase_leaderboard(phase)
    if table is None:
        return error(404, f"{phase.label} has no leaderboard yet (no counted votes)", "no_votes")
    return JsonResponse({**table, "own_model": own_model_name(agent_id=agent.pk, phase=phase)})
