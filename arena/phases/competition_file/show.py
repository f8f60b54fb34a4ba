"""A competition's plan read back: what `competition show` prints."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings

from agents.models import Agent
from arena.competition.models import Competition
from arena.competition.selectors import ARENA_SETTING_DEFAULTS
from arena.phases.competition_file.spec import BUDGET_KEYS
from evalsuite.registry import benchmarks as registry_benchmarks


def competition_agents_unprovisioned(competition: Competition) -> list[str]:
    """The agents the competition declares that `agents provision` has not made yet."""
    provisioned = set(Agent.objects.filter(active=True).values_list("name", flat=True))
    return [row.name for row in competition.agents.all() if row.name not in provisioned]


def competition_show(competition: Competition) -> dict[str, Any]:
    """The competition's plan as plain data (what `competition show` prints)."""
    agents = {agent.name: agent for agent in Agent.objects.filter(active=True)}
    return {
        "name": competition.name,
        "base_model": competition.base_model,
        "base_architecture": competition.base_architecture,
        "instruct_model": competition.instruct_model,
        "live_public_delay_minutes": competition.live_public_delay_minutes,
        "agents": [
            {
                "name": row.name,
                "harness": row.harness,
                "model": row.model,
                "command": row.command,
                "scaffold_budget_usd": str(row.scaffold_budget_usd),
                "provisioned": row.name in agents,
            }
            for row in competition.agents.all()
        ],
        "phases": [
            {
                "number": phase.number,
                "label": phase.label,
                "state": phase.state,
                "starts_at": phase.starts_at.isoformat(),
                "ends_at": phase.ends_at.isoformat(),
                "arena_closes_at": phase.arena_closes_at.isoformat()
                if phase.arena_closes_at
                else None,
                "feedback": phase.feedback,
                **{key: _plain(getattr(phase, key)) for key in BUDGET_KEYS},
            }
            for phase in competition.phases.order_by("number")
        ],
        "benchmarks": list(competition.benchmarks)
        or [entry.name for entry in registry_benchmarks()],
        "benchmarks_declared": bool(competition.benchmarks),
        "arena": {
            key: {
                "value": competition.arena_settings.get(key, getattr(settings, setting)),
                "from": "file" if key in competition.arena_settings else "settings",
            }
            for key, setting in ARENA_SETTING_DEFAULTS.items()
        },
    }


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Decimal) else value
