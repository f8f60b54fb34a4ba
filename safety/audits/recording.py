"""The audit run's report and the one way an audit writes a finding (refreshing the finding an
earlier run made from the same evidence)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from arena.competition.models import Phase
from safety.budget import Budget
from safety.models import Finding

MAX_EVIDENCE_MATCHES = 50
# What one agent's files may cost one audit run (settings of the same names override them).
# At the scan's measured 26 MB of content per CPU second, 32 GiB is about 20 minutes of one
# core; an agent whose files need more is reported as left unread, never cleared.
AUDIT_BUDGET_DEFAULTS = {
    "SAFETY_AUDIT_AGENT_SECONDS": 3600,
    "SAFETY_AUDIT_AGENT_BYTES": 32 * 1024**3,
    "SAFETY_AUDIT_AGENT_ENTRIES": 1_000_000,
}


def audit_budget() -> Budget:
    """A fresh budget for one agent's files, from the settings (a bad value fails loudly)."""
    values = {}
    for name, default in AUDIT_BUDGET_DEFAULTS.items():
        value = getattr(settings, name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ImproperlyConfigured(f"{name} must be a number of at least 0, not {value!r}")
        values[name] = value
    return Budget(
        seconds=float(values["SAFETY_AUDIT_AGENT_SECONDS"]),
        bytes=int(values["SAFETY_AUDIT_AGENT_BYTES"]),
        entries=int(values["SAFETY_AUDIT_AGENT_ENTRIES"]),
    )


Log = Callable[[str], None]


def finding_record(
    *,
    agent: Agent,
    kind: str,
    severity: str,
    summary: str,
    evidence: dict[str, object],
    key: str,
    phase: Phase | None = None,
) -> tuple[Finding, bool]:
    """Create the finding for this evidence, or refresh the one an earlier run made (its
    status and note untouched). `key` names the evidence: the same key is the same finding."""
    fingerprint = hashlib.sha256(f"{kind}\0{phase.pk if phase else ''}\0{key}".encode()).hexdigest()
    now = timezone.now()
    values = {
        "kind": kind,
        "severity": severity,
        "summary": summary[:500],
        "evidence": evidence,
        "phase": phase,
        "last_seen_at": now,
    }
    for _ in range(2):  # a concurrent run may create the same row between our read and write
        try:
            with transaction.atomic():
                finding, created = Finding.objects.select_for_update().get_or_create(
                    agent=agent, fingerprint=fingerprint, defaults=values
                )
                if not created:
                    for name, value in values.items():
                        setattr(finding, name, value)
                    finding.save()
                return finding, created
        except IntegrityError:
            continue
    raise RuntimeError(f"could not record finding {fingerprint}")


@dataclass
class AuditReport:
    agents: list[str] = field(default_factory=list)
    items: int = 0
    unscannable_items: int = 0
    files_scanned: int = 0
    records_scanned: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    created: list[Finding] = field(default_factory=list)
    refreshed: list[Finding] = field(default_factory=list)


class AuditRun:
    def __init__(self, report: AuditReport, log: Log) -> None:
        self.report = report
        self.log = log
        self._budgets: dict[int, Budget] = {}
        self._unread: dict[int, dict[str, object]] = {}  # agent pk -> where its budget ran out

    def budget(self, agent: Agent) -> Budget:
        """The agent's own budget for this run, shared by every pass over its files."""
        if agent.pk not in self._budgets:
            self._budgets[agent.pk] = audit_budget()
            self._budgets[agent.pk].pause()
        return self._budgets[agent.pk]

    @contextlib.contextmanager
    def spending(self, agent: Agent) -> Iterator[Budget]:
        """The agent's budget, its clock running for the block only."""
        budget = self.budget(agent)
        budget.resume()
        try:
            yield budget
        finally:
            budget.pause()

    def left_unread(self, agent: Agent, *, during: str, unread: list[str]) -> None:
        """The agent's budget ran out `during` a pass over its files; `unread`: what that pass
        did not reach. The first pass cut short is the evidence; later ones are named."""
        budget = self.budget(agent)
        if agent.pk in self._unread:
            self._unread[agent.pk]["passes_cut"].append(during)  # type: ignore[attr-defined]
            return
        self._unread[agent.pk] = {
            "limit": budget.limit,
            "budget": {"seconds": budget.seconds, "bytes": budget.bytes, "entries": budget.entries},
            "spent": {
                "seconds": round(budget.elapsed(), 1),
                "bytes": budget.bytes_read,
                "entries": budget.entries_walked,
            },
            "files_read": budget.files_read,
            "stopped_at": str(budget.at) if budget.at is not None else "",
            "left_unread": unread,
            "passes_cut": [during],
        }
        self.report.skipped.append(
            f"{agent.name}: {budget.describe()} during {during}; left unread: {'; '.join(unread)}"
        )
        self.log(f"  [{agent.name}] {budget.describe()}: the rest of its files left unread")

    def record_unread(self, audited: list[Agent]) -> None:
        """A finding per audited agent whose files were not all read: organizers see the gap
        (an agent may flood its sandbox to hide what it keeps behind the flood)."""
        for agent in audited:
            evidence = self._unread.get(agent.pk)
            if evidence is None:
                continue
            self.record(
                agent=agent,
                kind=Finding.Kind.UNREAD_FILES,
                severity="medium",
                summary=f"files left unread: {self.budget(agent).describe()} "
                f"(stopped at {evidence['stopped_at'] or 'the start'})",
                evidence=evidence,
                key="budget",
            )

    def record(self, **fields: object) -> Finding:
        finding, created = finding_record(**fields)  # type: ignore[arg-type]
        (self.report.created if created else self.report.refreshed).append(finding)
        self.log(
            f"  {'new' if created else 'seen'} finding {finding.pk}: {finding.kind} "
            f"({finding.severity}) {finding.summary}"
        )
        return finding
