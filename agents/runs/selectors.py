"""Reads of agent runs, for `agents runs` and the organizer's pages."""

from __future__ import annotations

from typing import Any

from agents.runs.limits import RunLimitValues, limits_for
from agents.runs.models import AgentRun


def runs_overview(*, limit: int = 200) -> list[dict[str, Any]]:
    """The newest runs, each with what it uses now (for an unfinished one)."""
    rows = []
    for run in AgentRun.objects.select_related("agent", "phase")[:limit]:
        values = RunLimitValues(run.cpus, run.memory_mib, run.max_processes)
        limits = limits_for(
            run.pk, values, unix_user=run.agent.unix_user, kind=run.limits_kind or None
        )
        usage = None if run.finished else limits.usage().__dict__
        rows.append(
            {
                "id": run.pk,
                "agent": run.agent.name,
                "phase": run.phase.label if run.phase else None,
                "harness": run.harness,
                "model": run.model,
                "command": run.command,
                "state": run.state,
                "attempts": run.attempts,
                "max_restarts": run.max_restarts,
                "limits": {
                    "kind": run.limits_kind,
                    "enforced": limits.description,  # the rlimit fallback says it is weaker
                    "cpus": run.cpus,
                    "memory_mib": run.memory_mib,
                    "max_processes": run.max_processes,
                },
                "usage": usage,
                "deadline": run.deadline,
                "exit_code": run.exit_code,
                "detail": run.detail,
                "created_at": run.created_at,
                "ended_at": run.ended_at,
            }
        )
    return rows
