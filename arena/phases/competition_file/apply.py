"""Comparing a competition file with the database, and applying it (see the package doc)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.credit import scaffold_budget_set
from agents.models import Agent
from arena.competition.models import Competition, CompetitionAgent, Phase
from arena.phases.competition_file.spec import (
    BUDGET_KEYS,
    NOW,
    AgentSpec,
    CompetitionFileError,
    CompetitionSpec,
    PhaseSpec,
)
from arena.phases.services import Engine, phase_limits_reapply
from cluster.models import ClusterAccount, GpuLedger

STARTED = (Phase.State.RUNNING, Phase.State.FROZEN, Phase.State.SERVING, Phase.State.CLOSED)
UNDER_WAY = (Phase.State.RUNNING, Phase.State.FROZEN, Phase.State.SERVING)
# The account limits the engine puts on each agent's Slurm association at a phase's start.
SLURM_LIMITS = ("gpu_hours", "max_gpus", "max_preemptible_gpus", "max_job_hours", "storage_gib")
PHASE_FIELDS = ("label", "starts_at", "ends_at", "arena_closes_at", "feedback", *BUDGET_KEYS)
AGENT_FIELDS = ("harness", "model", "command", "scaffold_budget_usd")


@dataclass(frozen=True)
class Change:
    """One difference between the file and the database, in words."""

    subject: str  # "competition cup", "agent ref_sft", "phase 2 (phase-2)", "arena", ...
    what: str  # "created", "removed", or the key that changes
    old: str = ""
    new: str = ""
    refused: str = ""  # why the competition's state forbids it; "" when allowed

    def __str__(self) -> str:
        text = f"{self.subject}: {self.what}"
        if self.what == "created":
            text += f" ({self.new})"
        elif self.old or self.new:
            text += f" {self.old or '(none)'} -> {self.new or '(none)'}"
        return text + (f"  REFUSED: {self.refused}" if self.refused else "")


Write = Callable[["_Target"], None]


@dataclass
class _Target:
    competition: Competition | None
    limits_changed: list[int] = field(default_factory=list)  # running phases' pks


@dataclass
class _Plan:
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)

    def add(self, change: Change) -> None:
        self.changes.append(change)

    @property
    def refusals(self) -> list[str]:
        return [str(change) for change in self.changes if change.refused]


def competition_diff(spec: CompetitionSpec, *, now: datetime | None = None) -> list[Change]:
    """What applying `spec` would change, refused changes included (marked); a
    CompetitionFileError if its dates do not fit together once resolved."""
    plan = _plan(spec, now or timezone.now())
    if plan.errors:
        raise CompetitionFileError(plan.errors)
    return plan.changes


def competition_apply(
    spec: CompetitionSpec, *, now: datetime | None = None, engine: Engine | None = None
) -> list[Change]:
    """Make the database say what `spec` says, in one transaction: all of it, or nothing and a
    CompetitionFileError listing every refusal. Applying the same spec again changes nothing.
    The competition's phases are locked while deciding, so the engine cannot move one between
    the check and the write."""
    now = now or timezone.now()
    with transaction.atomic():
        existing = Competition.objects.select_for_update().filter(name=spec.name).first()
        if existing is not None:
            list(Phase.objects.select_for_update().filter(competition=existing))
        plan = _plan(spec, now)
        if plan.errors or plan.refusals:
            raise CompetitionFileError(plan.errors + plan.refusals)
        target = _Target(competition=existing)
        for write in plan.writes:
            write(target)
    # The Slurm side of a running phase's new limits, after commit and agent by agent, as the
    # engine does at a start: one agent's refused account never undoes the file.
    for phase in Phase.objects.filter(pk__in=target.limits_changed):
        phase_limits_reapply(phase=phase, engine=engine)
    return plan.changes


# --- comparing -----------------------------------------------------------------------------
def _plan(spec: CompetitionSpec, now: datetime) -> _Plan:
    plan = _Plan()
    competition = Competition.objects.filter(name=spec.name).first()
    stored = list(competition.phases.order_by("number")) if competition else []
    started = any(phase.state in STARTED for phase in stored)
    _competition_changes(plan, spec, competition, started, stored)
    plan.errors.extend(_architecture_errors(spec))
    _agent_changes(plan, spec, competition, started)
    resolved = _phases_resolve(plan, spec.phases, stored, now)
    for number, (phase_spec, values) in enumerate(zip(spec.phases, resolved, strict=True), 1):
        row = stored[number - 1] if number <= len(stored) else None
        _phase_changes(plan, number, phase_spec, values, row, now)
    for row in stored[len(spec.phases) :]:
        refused = f"it is {row.state}: a phase that started stays" if row.state in STARTED else ""
        plan.add(Change(_phase_name(row.number, row.label), "removed", refused=refused))
        plan.writes.append(lambda target, pk=row.pk: Phase.objects.filter(pk=pk).delete())  # type: ignore[misc]  # callbacks' results are discarded
    return plan


def _competition_changes(
    plan: _Plan,
    spec: CompetitionSpec,
    competition: Competition | None,
    started: bool,
    stored: list[Phase],
) -> None:
    wanted = {
        "base_model": spec.base_model,
        "base_architecture": spec.base_architecture,
        "instruct_model": spec.instruct_model,
        "live_public_delay_minutes": spec.live_public_delay_minutes,
        "benchmarks": list(spec.benchmarks),
        "arena_settings": dict(spec.arena),
    }
    subject = f"competition {spec.name}"
    if competition is None:
        under_way = (
            Competition.objects.filter(phases__state__in=UNDER_WAY).values_list("name", flat=True)
        ).first()
        refused = (
            f"competition {under_way!r} is under way: the platform runs one at a time (the name"
            " identifies a competition, so renaming one is not possible)"
            if under_way
            else ""
        )
        plan.add(Change(subject, "created", new=_describe(wanted), refused=refused))

        def create(target: _Target) -> None:
            target.competition = Competition.objects.create(name=spec.name, **wanted)

        plan.writes.append(create)
        return
    served = any(p.state in (Phase.State.SERVING, Phase.State.CLOSED) for p in stored)
    changed = {}
    for key, new in wanted.items():
        old = getattr(competition, key)
        if old == new:
            continue
        refused = ""
        if key in ("base_model", "base_architecture", "instruct_model") and started:
            refused = "phase 1 has started: every agent trains from, and is measured against, it"
        if key == "benchmarks" and served:
            refused = "a phase was served and evaluated on them: later phases must compare"
        plan.add(Change(subject, key, _show(old), _show(new), refused))
        changed[key] = new
    if changed:
        plan.writes.append(
            lambda target: Competition.objects.filter(pk=competition.pk).update(**changed)
        )


def _architecture_errors(spec: CompetitionSpec) -> list[str]:
    """The declared base_architecture against the base checkpoint's config.json, where the
    base is a folder here (a hub id is taken as declared: nothing can be downloaded)."""
    if not spec.base_architecture:
        return []
    config = Path(spec.base_model) / "config.json"
    if not config.is_file():
        return []
    try:
        with config.open("rb") as f:
            found = json.loads(f.read(1 << 20)).get("model_type")
    except (OSError, ValueError, AttributeError) as why:
        return [f"competition.base_model = {spec.base_model!r}: config.json unreadable ({why})"]
    if found != spec.base_architecture:
        return [
            f"competition.base_architecture = {spec.base_architecture!r}: the base model's "
            f"config.json says model_type {found!r}"
        ]
    return []


def _agent_changes(
    plan: _Plan, spec: CompetitionSpec, competition: Competition | None, started: bool
) -> None:
    rows = {row.name: row for row in competition.agents.all()} if competition else {}
    for agent in spec.agents:
        wanted = {
            "harness": agent.harness,
            "model": agent.model,
            "command": list(agent.command),
            "scaffold_budget_usd": agent.scaffold_budget_usd,
        }
        row = rows.get(agent.name)
        if row is None:
            plan.add(Change(f"agent {agent.name}", "created", new=_describe(wanted)))
        else:
            differs = [key for key in AGENT_FIELDS if getattr(row, key) != wanted[key]]
            for key in differs:
                plan.add(
                    Change(f"agent {agent.name}", key, _show(getattr(row, key)), _show(wanted[key]))
                )
            if not differs:
                wanted = {}
        if wanted:
            plan.writes.append(
                lambda target, name=agent.name, values=wanted: (  # type: ignore[misc]  # callbacks' results are discarded
                    CompetitionAgent.objects.update_or_create(
                        competition=target.competition, name=name, defaults=values
                    )
                )
            )
        _scaffold_budget_change(plan, agent)
    for name, row in rows.items():
        if any(agent.name == name for agent in spec.agents):
            continue
        refused = (
            "phase 1 has started: take an agent out with `agents deprovision`" if started else ""
        )
        plan.add(Change(f"agent {name}", "removed", refused=refused))
        plan.writes.append(
            lambda target, pk=row.pk: CompetitionAgent.objects.filter(pk=pk).delete()  # type: ignore[misc]  # callbacks' results are discarded
        )


def _scaffold_budget_change(plan: _Plan, spec: AgentSpec) -> None:
    """The budget in force on a provisioned agent's ledger; an agent not provisioned yet gets
    it when the file is applied again after `agents provision`."""
    agent = Agent.objects.filter(name=spec.name, active=True).first()
    if agent is None or agent.scaffold_credit_limit == spec.scaffold_budget_usd:
        return
    used = agent.scaffold_credit_spent + agent.scaffold_credit_reserved
    refused = (
        f"it has spent and reserved ${used:.2f} of it already"
        if spec.scaffold_budget_usd < used
        else ""
    )
    plan.add(
        Change(
            f"agent {spec.name}",
            "scaffold budget in force",
            f"${agent.scaffold_credit_limit:.2f}",
            f"${spec.scaffold_budget_usd:.2f}",
            refused,
        )
    )
    plan.writes.append(
        lambda target: scaffold_budget_set(agent=agent, limit_usd=spec.scaffold_budget_usd)  # type: ignore[arg-type]  # callbacks' results are discarded
    )


def _phases_resolve(
    plan: _Plan, phases: tuple[PhaseSpec, ...], stored: list[Phase], now: datetime
) -> list[dict[str, Any]]:
    """Each phase's values as the Phase row would hold them: "now" is the stored start of a
    phase that exists, lengths count from the resolved start. Dates that do not fit together
    are errors of the file."""
    resolved: list[dict[str, Any]] = []
    for number, spec in enumerate(phases, 1):
        row = stored[number - 1] if number <= len(stored) else None
        if spec.starts_at == NOW:
            starts_at = row.starts_at if row is not None else now
        elif spec.starts_at is None:
            before = resolved[-1]
            starts_at = before["arena_closes_at"] or before["ends_at"]
        else:
            starts_at = spec.starts_at
        ends_at = spec.ends_at or starts_at + (spec.length or timedelta(0))
        arena_closes_at = spec.arena_closes_at or (
            ends_at + spec.arena_length if spec.arena_length else None
        )
        where = f"phases[{number}]"
        if ends_at <= starts_at:
            plan.errors.append(
                f"{where}: ends {_show(ends_at)}, not after its start {_show(starts_at)}"
            )
        if arena_closes_at is not None and arena_closes_at <= ends_at:
            plan.errors.append(
                f"{where}: its arena closes {_show(arena_closes_at)}, not after it ends {_show(ends_at)}"
            )
        if resolved and starts_at < resolved[-1]["ends_at"]:
            plan.errors.append(
                f"{where}: starts {_show(starts_at)}, before phase {number - 1} ends "
                f"{_show(resolved[-1]['ends_at'])}"
            )
        values = {
            "label": spec.label,
            "starts_at": starts_at,
            "ends_at": ends_at,
            "arena_closes_at": arena_closes_at,
            "feedback": spec.feedback,
            **{key: getattr(spec, key) for key in BUDGET_KEYS},
        }
        resolved.append(values)
    return resolved


def _phase_changes(
    plan: _Plan,
    number: int,
    spec: PhaseSpec,
    values: dict[str, Any],
    row: Phase | None,
    now: datetime,
) -> None:
    if row is None:
        plan.add(Change(_phase_name(number, spec.label), "created", new=_describe(values)))
        plan.writes.append(
            lambda target: Phase.objects.create(
                competition=target.competition, number=number, **values
            )
        )
        return
    subject = _phase_name(number, row.label)
    changed = {key: values[key] for key in PHASE_FIELDS if getattr(row, key) != values[key]}
    usage = _phase_usage(row) if row.state == Phase.State.RUNNING else {}
    for key, new in changed.items():
        old = getattr(row, key)
        refused = _phase_refusal(row, key, old, new, usage, now)
        plan.add(Change(subject, key, _show(old), _show(new), refused))
    if not changed:
        return

    def update(target: _Target) -> None:
        Phase.objects.filter(pk=row.pk).update(**changed)
        if row.state != Phase.State.RUNNING:
            return
        if "api_credit_usd" in changed:
            _credit_move(row, changed["api_credit_usd"] - row.api_credit_usd)
        if any(key in changed for key in SLURM_LIMITS):
            target.limits_changed.append(row.pk)

    plan.writes.append(update)


def _phase_refusal(
    row: Phase, key: str, old: Any, new: Any, usage: dict[str, Decimal], now: datetime
) -> str:
    """Why `key` of a phase in `row.state` may not go from `old` to `new`; "" if it may."""
    state = row.state
    if state == Phase.State.SCHEDULED:
        return ""
    if state == Phase.State.CLOSED:
        return "the phase is closed"
    if key == "label":
        return f"it is {state}: the label names its budget period, its battles and its models"
    if key == "starts_at":
        return f"it is {state}: it has started"
    if key == "feedback":
        return f"it is {state}: its feedback went out when it started"
    if key == "arena_closes_at":
        if new is not None and new <= now:
            return f"it is {state}: its arena cannot close in the past"
        return ""
    if state != Phase.State.RUNNING:
        return f"it is {state}: its training is over"
    if key == "ends_at":
        return "it runs: it cannot end in the past" if new <= now else ""
    if key in usage and new < usage[key]:
        return f"it runs: an agent has used {usage[key]:.2f} of it"
    return ""


def _phase_usage(phase: Phase) -> dict[str, Decimal]:
    """The most any active agent has used, in this running phase, of each budget that is
    used up (GPU-hours, API credit, storage)."""
    agents = list(Agent.objects.filter(active=True, cluster_account__isnull=False))
    account_ids = [agent.cluster_account_id for agent in agents]
    gpu_seconds = GpuLedger.objects.filter(account_id__in=account_ids, period=phase.label)
    storage = ClusterAccount.objects.filter(pk__in=account_ids)
    # An agent's phase credit is granted on top of what it had spent and reserved, so what it
    # has used of this phase is what its limit leaves of the phase's amount.
    credit = [
        agent.credit_spent + agent.credit_reserved - (agent.credit_limit - phase.api_credit_usd)
        for agent in agents
    ]
    return {
        "gpu_hours": Decimal(max((g.gpu_seconds for g in gpu_seconds), default=0)) / Decimal(3600),
        "api_credit_usd": max(credit, default=Decimal(0)),
        "storage_gib": Decimal(max((a.storage_bytes_used for a in storage), default=0))
        / Decimal(1 << 30),
    }


def _credit_move(phase: Phase, delta: Decimal) -> None:
    """Move every active agent's credit limit by the change of the running phase's amount,
    never below what one spent and reserved (checked in the update itself)."""
    agents = Agent.objects.filter(active=True, cluster_account__isnull=False)
    total = agents.count()
    moved = agents.filter(
        credit_limit__gte=F("credit_spent") + F("credit_reserved") - delta
    ).update(credit_limit=F("credit_limit") + delta)
    if moved != total:
        raise CompetitionFileError(
            [f"{phase.label}.api_credit_usd: an agent spent past the new amount meanwhile"]
        )


def _phase_name(number: int, label: str) -> str:
    return f"phase {number} ({label})"


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return timezone.localtime(value).isoformat(timespec="seconds")
    if isinstance(value, list | tuple):  # JSON: an argument may hold a comma or a space
        return json.dumps(list(value)) if value else "[] (all)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "(settings.py)"
    return str(value)


def _describe(values: dict[str, Any]) -> str:
    return "; ".join(f"{key} {_show(value) or '(none)'}" for key, value in values.items())
