"""Reads of the safety context: findings for the organizer's dashboard, and the published
practice applied to benchmark results (a confirmed violation scores as the base model)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from arena.competition.models import Phase
from arena.phases.models import PhaseContestant
from safety.models import Finding

SEVERITY_ORDER = {s: i for i, s in enumerate(reversed(Finding.Severity.values))}  # critical=0
STATUS_ORDER = {Finding.Status.OPEN: 0, Finding.Status.CONFIRMED: 1, Finding.Status.DISMISSED: 2}


def _in_phase(findings: QuerySet[Finding], phase: Phase | str | None) -> QuerySet[Finding]:
    """Findings that concern `phase`: those of its nominations and the agent-wide ones (files,
    trajectories: they have no phase). No phase: all findings."""
    if phase is None:
        return findings
    if isinstance(phase, str):
        return findings.filter(phase__isnull=True) | findings.filter(phase__label=phase)
    return findings.filter(phase__isnull=True) | findings.filter(phase=phase)


def _confirmed_violations() -> QuerySet[Finding]:
    return Finding.objects.filter(
        status=Finding.Status.CONFIRMED, kind__in=list(Finding.VIOLATIONS)
    )


def confirmed_violations(phase: Phase | str | None = None) -> dict[str, list[str]]:
    """Agent name -> the rules it broke (`Finding.Kind` labels, sorted), for every agent with a
    confirmed finding of a rule-breaking kind (see `Finding.VIOLATIONS`: a wrong model card
    alone is not one) concerning `phase`. The one answer to "whose results are replaced":
    evalsuite asks it through `evalsuite.replacements` (registered in `SafetyConfig.ready`),
    the dashboard and the leaderboard through this module."""
    found: dict[str, set[str]] = {}
    for agent, kind in _in_phase(_confirmed_violations(), phase).values_list("agent__name", "kind"):
        found.setdefault(agent, set()).add(str(Finding.Kind(kind).label))
    return {agent: sorted(rules) for agent, rules in sorted(found.items())}


def agents_with_confirmed_violations(phase: Phase | str | None = None) -> set[str]:
    """Names of agents with a confirmed violation concerning `phase` (`confirmed_violations`)."""
    return set(confirmed_violations(phase))


def contestant_violations() -> dict[str, list[str]]:
    """Contestant display name -> the rules its agent broke, for each arena entry of a
    nominated checkpoint whose agent has a confirmed violation concerning that entry's phase
    (the finding's own phase, or none: the agent's files concern every phase). For the
    leaderboard's annotation; reference models are never marked."""
    violations = list(_confirmed_violations().values_list("agent_id", "phase_id", "kind"))
    if not violations:
        return {}
    entries = PhaseContestant.objects.filter(
        role=PhaseContestant.Role.NOMINEE,
        nomination__agent_id__in={agent for agent, _, _ in violations},
    ).values_list("contestant__display_name", "phase_id", "nomination__agent_id")
    found: dict[str, set[str]] = {}
    for name, entry_phase, entry_agent in entries:
        for agent, phase, kind in violations:
            if agent == entry_agent and phase in (None, entry_phase):
                found.setdefault(name, set()).add(str(Finding.Kind(kind).label))
    return {name: sorted(rules) for name, rules in sorted(found.items())}


def benchmark_scores_after_audit(
    scores: dict[str, dict[str, float]],
    base: dict[str, float],
    phase: Phase | str | None = None,
) -> dict[str, dict[str, float]]:
    """`scores` (agent name -> benchmark -> score) with the scores of every agent that has a
    confirmed violation replaced by the base model's (`base`, benchmark -> score), as the
    published benchmark practice does. A new dict; the inputs are not changed."""
    replaced = agents_with_confirmed_violations(phase)
    return {
        agent: dict(base) if agent in replaced else dict(per_benchmark)
        for agent, per_benchmark in scores.items()
    }


def findings_for_dashboard(phase: Phase | str | None = None) -> dict[str, Any]:
    """Findings concerning `phase` (all when None), open ones first, then by severity and
    newest, as plain values a template or JSON can show; with counts by status and kind."""
    findings = list(_in_phase(Finding.objects.all(), phase).select_related("agent", "phase"))
    findings.sort(key=lambda f: -f.created_at.timestamp())
    findings.sort(key=lambda f: (STATUS_ORDER[f.status], SEVERITY_ORDER[f.severity]))
    rows = [
        {
            "id": f.pk,
            "agent": f.agent.name,
            "phase": f.phase.label if f.phase else None,
            "kind": f.kind,
            "kind_label": f.get_kind_display(),
            "severity": f.severity,
            "status": f.status,
            "violation": f.is_violation,
            "summary": f.summary,
            "evidence": f.evidence,
            "note": f.note,
            "created_at": f.created_at.isoformat(),
            "updated_at": f.updated_at.isoformat(),
            "last_seen_at": f.last_seen_at.isoformat(),
        }
        for f in findings
    ]
    replaced = confirmed_violations(phase)
    counts = {status: 0 for status in Finding.Status.values}
    by_kind: dict[str, int] = {}
    for f in findings:
        counts[f.status] += 1
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    return {
        "findings": rows,
        "counts": counts,
        "by_kind": by_kind,
        "replaced_agents": sorted(replaced),
        "replaced": replaced,  # agent -> the rules it broke
    }
