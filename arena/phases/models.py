"""What the phase engine did: which contestant stands for which nomination in a phase, each
state transition (exactly once), and the feedback each agent received."""

from __future__ import annotations

from django.db import models


class PhaseContestant(models.Model):
    """A model in a phase's arena: an agent's nominated checkpoint, or a reference model."""

    class Role(models.TextChoices):
        NOMINEE = "nominee"
        REFERENCE = "reference"

    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.CASCADE, related_name="contestants"
    )
    contestant = models.ForeignKey(
        "serving.Contestant", on_delete=models.PROTECT, related_name="phase_entries"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    nomination = models.OneToOneField(
        "agents.Nomination",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="phase_contestant",
    )
    checkpoint_path = models.CharField(max_length=1000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["phase", "role", "contestant__display_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["phase", "contestant"], name="one_entry_per_contestant_and_phase"
            )
        ]

    def __str__(self) -> str:
        return f"{self.phase.label}: {self.contestant} ({self.role})"


class PhaseTransition(models.Model):
    """One move of a phase's state machine. Unique per (phase, state): each happens once."""

    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.CASCADE, related_name="transitions"
    )
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    at = models.DateTimeField(auto_now_add=True)
    detail = models.JSONField(default=dict)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["phase", "to_state"], name="each_transition_once")
        ]

    def __str__(self) -> str:
        return f"{self.phase.label}: {self.from_state} -> {self.to_state}"


class FeedbackBundle(models.Model):
    """What one agent was given about its own model at the start of a phase."""

    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.CASCADE, related_name="feedback_bundles"
    )
    source_phase = models.ForeignKey(
        "competition.Phase", on_delete=models.CASCADE, related_name="+"
    )
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="feedback_bundles"
    )
    battles = models.PositiveIntegerField()
    folder = models.CharField(max_length=1000, help_text="the copy in the agent's sandbox")
    delivered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["phase", "agent"]
        constraints = [
            models.UniqueConstraint(fields=["phase", "agent"], name="one_bundle_per_agent_phase")
        ]

    def __str__(self) -> str:
        return f"feedback for {self.agent} in {self.phase.label} ({self.battles} battles)"
