"""What the audit found: one row per distinct piece of evidence, kept across re-runs."""

from __future__ import annotations

from django.db import models


class Finding(models.Model):
    """A suspected rule violation. The audit creates and refreshes findings; only an
    organizer changes `status`. A re-run that sees the same evidence (the same `fingerprint`)
    updates the row it made before instead of adding one, and never touches its status."""

    class Kind(models.TextChoices):
        CONTAMINATION = "contamination", "trained on evaluation data"
        HARDCODED_OUTPUT = "hardcoded_output", "hard-coded outputs"
        FOREIGN_ARTIFACT = "foreign_artifact", "used another participant's artifact"
        MODEL_SUBSTITUTION = "model_substitution", "model substitution"
        MODEL_CARD = "model_card", "model card disagrees with the run logs"
        JUDGE = "judge", "flagged by the LLM judge"
        # Not a violation: the audit's budget ran out before it read all of the agent's files.
        UNREAD_FILES = "unread_files", "files the audit left unread"

    class Severity(models.TextChoices):
        INFO = "info"
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"
        CRITICAL = "critical"

    class Status(models.TextChoices):
        OPEN = "open"
        CONFIRMED = "confirmed"
        DISMISSED = "dismissed"

    # A confirmed finding of these kinds breaks a competition rule, and the agent's
    # benchmark results are replaced by the base model's. A wrong model card does not.
    VIOLATIONS = {
        Kind.CONTAMINATION,
        Kind.HARDCODED_OUTPUT,
        Kind.FOREIGN_ARTIFACT,
        Kind.MODEL_SUBSTITUTION,
        Kind.JUDGE,
    }

    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="findings")
    phase = models.ForeignKey(
        "competition.Phase",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="findings",
        help_text="the phase of the nomination it concerns; empty for the agent's files",
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    summary = models.CharField(max_length=500)
    evidence = models.JSONField()
    fingerprint = models.CharField(max_length=64, help_text="sha256 of kind, phase and evidence")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    note = models.TextField(blank=True, help_text="the organizer's reasons")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_seen_at = models.DateTimeField(help_text="the last audit run that saw this evidence")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "fingerprint"], name="one_finding_per_evidence"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.kind} ({self.severity}, {self.status})"

    @property
    def is_violation(self) -> bool:
        return self.kind in self.VIOLATIONS


class JudgeReview(models.Model):
    """An excerpt of a trajectory the judge has read, so a re-run does not pay for it again."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    judge = models.CharField(max_length=200)
    digest = models.CharField(max_length=64, help_text="sha256 of the excerpt")
    violation = models.BooleanField()
    verdict = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "judge", "digest"], name="one_review_per_excerpt"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.judge} {'violation' if self.violation else 'clean'}"
