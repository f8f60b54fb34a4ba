"""Writes of the safety context: the audit run that records findings, and status changes.

`audit_run` reads the other apps (agents, their files, cluster charges, the competition's
reference models) and writes only `Finding` and `JudgeReview` rows. Each audit is a module of
`safety.audits`; this module runs them in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.conf import settings
from django.utils import timezone

from agents.models import Agent, Nomination
from arena.competition.models import Phase
from safety import contamination, hardcoded
from safety.audits.benchmark_items import audit_checkpoint_texts, audit_files
from safety.audits.model_card import audit_model_card, run_log_for
from safety.audits.recording import AuditReport, AuditRun, Log, finding_record
from safety.audits.shared_artifacts import (
    audit_shared_data,
    audit_shared_weights,
    references_of,
)
from safety.audits.substitution import audit_substitution
from safety.audits.trajectory_judge import audit_trajectory
from safety.judge import ChatCompletionsJudge, TrajectoryJudge
from safety.models import Finding
from safety.ngrams import EvalItemLike

__all__ = [
    "AuditReport",
    "EvaluationDataMissing",
    "audit_run",
    "default_evaluation_items",
    "finding_record",
    "finding_set_status",
    "judge_from_settings",
    "run_log_for",
]


class EvaluationDataMissing(ValueError):
    """A benchmark's test set is not loaded: an audit without it would clear an agent that
    trained on it, so none runs."""


def default_evaluation_items() -> Iterable[EvalItemLike]:
    """Every item of every benchmark the registry loads (its pinned hub sets, from the hub
    cache), held-out and safety ones included. Raises EvaluationDataMissing, naming every
    set not in the cache, before anything is read."""
    from evalsuite import registry  # imported late: safety sits above it

    missing = registry.missing_data()
    if missing:
        raise EvaluationDataMissing(
            f"{len(missing)} benchmark data set(s) missing, the audit would not see them: "
            + " | ".join(str(error) for error in missing)
        )
    return registry.evaluation_items()


def finding_set_status(*, finding: Finding, status: str, note: str | None = None) -> Finding:
    if status not in Finding.Status.values:
        raise ValueError(f"status must be one of {', '.join(Finding.Status.values)}")
    changes: dict[str, object] = {"status": status, "updated_at": timezone.now()}
    if note is not None:
        changes["note"] = note
    Finding.objects.filter(pk=finding.pk).update(**changes)
    finding.refresh_from_db()
    return finding


def audit_run(
    *,
    agent_names: list[str] | None = None,
    phase: Phase | None = None,
    items: Iterable[EvalItemLike] | None = None,
    judge: TrajectoryJudge | None = None,
    log: Log = lambda line: None,
) -> AuditReport:
    """Audit the named agents (all by default), their nominations in `phase` (all phases by
    default), against `items` (every evaluation item by default). Safe to re-run: the same
    evidence refreshes the same finding."""
    agents = list(Agent.objects.order_by("name"))
    if agent_names:
        unknown = sorted(set(agent_names) - {a.name for a in agents})
        if unknown:
            raise ValueError(f"no agent called {', '.join(unknown)}")
        agents = [a for a in agents if a.name in agent_names]
    nominations = Nomination.objects.filter(agent__in=agents).select_related(
        "agent", "checkpoint", "phase__competition"
    )
    if phase is not None:
        nominations = nominations.filter(phase=phase)
    nominations = list(nominations.order_by("agent__name", "phase__starts_at"))

    report = AuditReport(agents=[a.name for a in agents])
    run = AuditRun(report, log)
    evaluation = list(items if items is not None else default_evaluation_items())
    text_index = contamination.contamination_index(evaluation)
    code_index = hardcoded.hardcoded_index(evaluation)
    report.items = len(evaluation)
    report.unscannable_items = len(text_index.unscannable)
    per_benchmark = Counter(item.benchmark for item in evaluation)
    log(
        f"audit of {len(agents)} agent(s), {len(nominations)} nomination(s); "
        f"{len(evaluation)} evaluation items of {len(per_benchmark)} benchmark(s) indexed "
        f"({len(text_index.unscannable)} too short): "
        + ", ".join(f"{name} {count}" for name, count in sorted(per_benchmark.items()))
    )
    references = references_of(nominations)
    for agent in agents:
        log(f"[{agent.name}] files")
        audit_files(run, agent, text_index, code_index)
        audit_checkpoint_texts(run, agent, code_index, nominations)
    log("artifacts: data and weights across agents")
    audit_shared_data(run, agents, references)
    audit_shared_weights(run, agents)
    for nomination in nominations:
        log(f"[{nomination.agent.name}] nomination in {nomination.phase.label}")
        audit_substitution(run, nomination, references)
        audit_model_card(run, nomination)
    run.record_unread(agents)
    if judge is not None:
        for agent in agents:
            log(f"[{agent.name}] trajectory judge ({judge.name})")
            audit_trajectory(run, agent, judge)
    log(
        f"done: {report.files_scanned} files, {report.records_scanned} records; "
        f"{len(report.created)} new finding(s), {len(report.refreshed)} seen before"
    )
    return report


def judge_from_settings(
    *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
) -> ChatCompletionsJudge | None:
    """The judge: `model` (default `SAFETY_JUDGE_MODEL`) at `base_url` (default
    `SAFETY_JUDGE_BASE_URL`, else the site's own API proxy) with `api_key` (default
    `SAFETY_JUDGE_API_KEY`, an organizer proxy token); None when no model is configured."""
    model = model or getattr(settings, "SAFETY_JUDGE_MODEL", "")
    if not model:
        return None
    proxy = f"{settings.AGENTS_ARENA_URL.rstrip('/')}/proxy/v1"
    return ChatCompletionsJudge(
        base_url=base_url or getattr(settings, "SAFETY_JUDGE_BASE_URL", "") or proxy,
        api_key=api_key or getattr(settings, "SAFETY_JUDGE_API_KEY", "") or "",
        model=model,
    )
