"""The feedback part of the agent API (`/api/v1/votes`, `/api/v1/leaderboard`): what the
phase's feedback policy gives the calling agent about its own model, and nothing else."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from pydantic import BaseModel, ConfigDict

from agents.api import caller
from agents.models import Agent
from arena.competition.models import Phase
from arena.json_api import ApiError, replies
from arena.leaderboard.services import category_check, category_leaderboard
from arena.phases.selectors import (
    comparison_records,
    feedback_phase_for,
    own_battles,
    own_model_name,
    phase_leaderboard,
)

router = Router(tags=["feedback"])

PHASE = Field(
    None, description="a phase label, e.g. phase-1 (default: the latest one you were given)"
)


class PhaseQuery(Schema):
    phase: str | None = PHASE


class LeaderboardQuery(Schema):
    phase: str | None = PHASE
    category: str | None = Field(
        None,
        description="only battles whose prompt has this tag: coding, math, creative_writing, "
        "instruction_following, long_query, multi_turn, non_english or hard",
    )


class Votes(BaseModel):
    model_config = ConfigDict(extra="allow")

    phase: str
    own_model: str | None = Field(description="your nominee's name in the phase, if any")
    battles: list[dict[str, Any]] = Field(description="the battles of your own model")
    comparisons: list[dict[str, Any]] = Field(
        description="each battle as a pairwise comparison record"
    )


class Leaderboard(BaseModel):
    model_config = ConfigDict(extra="allow")

    own_model: str | None


def _feedback_phase(agent: Agent, label: str | None) -> Phase:
    phase = feedback_phase_for(agent_id=agent.pk, label=label or None)
    if phase is None:
        which = f"of {label}" if label else "yet"
        raise ApiError(
            "no_feedback",
            f"no votes {which} for you: the feedback policy gives each agent the battles of its"
            " own model at the start of the next phase",
        )
    return phase


@router.get(
    "/votes",
    response=replies({200: Votes}, 403),
    operation_id="votes_export",
    url_name="api-votes",
    summary="your own model's battles of a phase you were given feedback on",
)
def votes(request: HttpRequest, query: Query[PhaseQuery]) -> dict[str, Any]:
    agent = caller(request)
    phase = _feedback_phase(agent, query.phase)
    own_model = own_model_name(agent_id=agent.pk, phase=phase)
    rows = own_battles(agent_id=agent.pk, phase=phase)
    return {
        "phase": phase.label,
        "own_model": own_model,
        "battles": rows,
        "comparisons": comparison_records(rows, own_model) if own_model else [],
    }


@router.get(
    "/leaderboard",
    response=replies({200: Leaderboard}, 403, 404, 503),
    operation_id="leaderboard",
    url_name="api-leaderboard",
    summary="the leaderboard of a phase you were given feedback on, overall or of one category",
)
def leaderboard(request: HttpRequest, query: Query[LeaderboardQuery]) -> dict[str, Any]:
    agent = caller(request)
    if query.category:
        category_check(query.category)  # CategoryUnknown before the phase: a typo is a typo
    phase = _feedback_phase(agent, query.phase)
    if query.category:
        snapshot = category_leaderboard(category=query.category, phase=phase.label)
        table = phase_leaderboard(phase, snapshot=snapshot)
    else:
        table = phase_leaderboard(phase)
    if table is None:
        raise ApiError("no_votes", f"{phase.label} has no leaderboard yet (no counted votes)")
    return {**table, "own_model": own_model_name(agent_id=agent.pk, phase=phase)}
