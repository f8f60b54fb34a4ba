"""The audit run's report and the one way an audit writes a finding (refreshing the finding an
earlier run made from the same evidence)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from arena.competition.models import Phase
from safety.models import Finding

MAX_EVIDENCE_MATCHES = 50

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

    def record(self, **fields: object) -> Finding:
        finding, created = finding_record(**fields)  # type: ignore[arg-type]
        (self.report.created if created else self.report.refreshed).append(finding)
        self.log(
            f"  {'new' if created else 'seen'} finding {finding.pk}: {finding.kind} "
            f"({finding.severity}) {finding.summary}"
        )
        return finding
