"""The competition's task statement, the harness's system prompt: the goal, the phase's real
budgets and deadline, the forbidden behaviours (DESIGN.md §1) and how to use `arena-agent`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings

from agents.models import Agent
from arena.competition.selectors import phase_current

TEMPLATE = Path(__file__).with_name("task_statement.md")


@dataclass(frozen=True)
class TaskFacts:
    agent_name: str
    unix_user: str
    home: str
    competition: str
    base_model: str
    phase: str
    deadline: str
    gpu_hours: str
    max_gpus: int
    max_preemptible_gpus: int
    max_job_hours: int
    storage_gib: int
    api_credit_usd: str


def _amount(value: Decimal | float) -> str:
    return f"{Decimal(str(value)).normalize():f}"


def task_facts(agent: Agent, deadline: datetime | None) -> TaskFacts:
    """The current phase's budgets (the defaults of settings when no phase has begun)."""
    phase = phase_current()
    if phase is not None:
        competition = phase.competition
        end = deadline or phase.ends_at
        return TaskFacts(
            agent_name=agent.name, unix_user=agent.unix_user, home=agent.sandbox,
            competition=competition.name, base_model=competition.base_model or "the base model",
            phase=phase.label, deadline=f"{end:%Y-%m-%d %H:%M} UTC",
            gpu_hours=_amount(phase.gpu_hours), max_gpus=phase.max_gpus,
            max_preemptible_gpus=phase.max_preemptible_gpus, max_job_hours=phase.max_job_hours,
            storage_gib=phase.storage_gib, api_credit_usd=_amount(phase.api_credit_usd),
        )  # fmt: skip
    return TaskFacts(
        agent_name=agent.name, unix_user=agent.unix_user, home=agent.sandbox,
        competition="the RSI Arena", base_model="the base model",
        phase=settings.AGENTS_DEFAULT_PERIOD,
        deadline=f"{deadline:%Y-%m-%d %H:%M} UTC" if deadline else "the end of the phase",
        gpu_hours=_amount(settings.AGENTS_DEFAULT_GPU_HOURS),
        max_gpus=settings.AGENTS_DEFAULT_MAX_GPUS,
        max_preemptible_gpus=settings.AGENTS_DEFAULT_MAX_PREEMPTIBLE_GPUS,
        max_job_hours=settings.AGENTS_DEFAULT_MAX_JOB_HOURS,
        storage_gib=settings.AGENTS_DEFAULT_STORAGE_GIB,
        api_credit_usd=_amount(settings.AGENTS_DEFAULT_API_CREDIT_USD),
    )  # fmt: skip


def task_statement(facts: TaskFacts) -> str:
    return TEMPLATE.read_text(encoding="utf-8").format_map(asdict(facts))


FIRST_MESSAGE = (
    "Your run starts now. Check your budget, plan your first experiment, write the plan in your"
    " journal, and begin."
)
