"""What the phase engine did: which contestant stands for which nomination in a phase, each
state transition (exactly once), the feedback each agent received, and what failed (for one
agent, or in the worker) without stopping the engine."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


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


class AgentStepFailure(models.Model):
    """A step of a phase's start that failed for one agent: its account could not be given the
    phase's limits, or its feedback could not be written into its sandbox. The start went on
    for everyone else; while the phase runs, each tick retries the step (never the usage
    reset, which the start did once) until it succeeds and `resolved_at` is set."""

    class Step(models.TextChoices):
        BUDGET = "budget", "the phase's limits on its Slurm account"
        FEEDBACK = "feedback", "its feedback files"

    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.CASCADE, related_name="agent_step_failures"
    )
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="phase_step_failures"
    )
    step = models.CharField(max_length=16, choices=Step.choices)
    error = models.TextField()
    attempts = models.PositiveIntegerField(default=1)
    first_failed_at = models.DateTimeField(auto_now_add=True)
    last_failed_at = models.DateTimeField(auto_now=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_failed_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["phase", "agent", "step"], name="one_failure_per_agent_step_and_phase"
            )
        ]

    def __str__(self) -> str:
        return f"{self.phase.label}: {self.step} failed for {self.agent}"


class WorkerFailure(models.Model):
    """A part of a `phases run` round that raised (the tick, a phase's move, serving,
    evaluations, storage): the worker logged it, kept the arena up and tried again. The same
    failure again is counted on its row (`repeats`, `last_at`), so one that persists does not
    hide the others."""

    task = models.CharField(max_length=64)
    phase = models.ForeignKey(
        "competition.Phase",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="worker_failures",
    )
    error = models.TextField()
    at = models.DateTimeField(auto_now_add=True)
    repeats = models.PositiveIntegerField(default=1)
    last_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-last_at", "-id"]

    def __str__(self) -> str:
        return f"{self.task} failed at {self.at:%Y-%m-%d %H:%M:%S}"
