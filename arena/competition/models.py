"""The competition's calendar and rules: read by every app, so it depends on none of them.
(The phase *engine*, which moves phases along and calls into the apps, sits on top.)"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import models


class Competition(models.Model):
    name = models.CharField(max_length=100, unique=True)
    base_model = models.CharField(
        max_length=1000, help_text="checkpoint path or hub id of the base model"
    )
    base_architecture = models.CharField(
        max_length=100,
        blank=True,
        help_text="the base model's architecture, its config.json model_type (e.g. nemotron_h)",
    )
    instruct_model = models.CharField(
        max_length=1000, blank=True, help_text="the instruct reference"
    )
    live_public_delay_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="show agents' trajectories to the public this many minutes late; empty: never",
    )
    # What a competition file declares beyond the calendar (arena/phases/competition_file.py).
    benchmarks = models.JSONField(
        default=list, blank=True, help_text="the registry's benchmarks it evaluates; empty: all"
    )
    arena_settings = models.JSONField(
        default=dict,
        blank=True,
        help_text="arena settings it overrides (`arena_settings_current`); the rest: settings.py",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class CompetitionAgent(models.Model):
    """An agent the competition fields, and what runs it (issue 15): the harness that drives
    it, the model its scaffold calls through the platform's gateway, and that scaffold's
    budget, apart from the agent's own API credit."""

    class Harness(models.TextChoices):
        ARENA = "arena", "the platform's own harness"
        COMMAND = "command", "a command the organizers bring"
        NONE = "none", "none: the agent is run by hand"

    competition = models.ForeignKey(Competition, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=32, help_text="the agent's name")
    harness = models.CharField(max_length=16, choices=Harness.choices, default=Harness.ARENA)
    model = models.CharField(
        max_length=100, blank=True, help_text="the upstream (proxy model name) the scaffold calls"
    )
    command = models.JSONField(
        default=list, blank=True, help_text="argv of a `command` harness, run in the sandbox"
    )
    scaffold_budget_usd = models.DecimalField(
        max_digits=10, decimal_places=2, default=Decimal("50")
    )

    class Meta:
        ordering = ["competition", "name"]
        constraints = [
            models.UniqueConstraint(fields=["competition", "name"], name="one_entry_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.competition}: {self.name} ({self.harness})"


class Phase(models.Model):
    class State(models.TextChoices):
        SCHEDULED = "scheduled"
        RUNNING = "running"  # agents train; nominations may change
        FROZEN = "frozen"  # nominations are final
        SERVING = "serving"  # nominated models are in the arena
        CLOSED = "closed"

    class Feedback(models.TextChoices):
        NONE = "none", "no votes"
        OWN_BATTLES = "own_battles", "the battles of the agent's own model, and the leaderboard"

    competition = models.ForeignKey(Competition, on_delete=models.CASCADE, related_name="phases")
    number = models.PositiveSmallIntegerField()
    label = models.SlugField(max_length=64, help_text="the budget period name, e.g. phase-1")
    state = models.CharField(max_length=16, choices=State.choices, default=State.SCHEDULED)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    arena_closes_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when the arena of this phase's models closes; default: when the next phase starts",
    )
    feedback = models.CharField(max_length=16, choices=Feedback.choices, default=Feedback.NONE)
    # Per-agent budgets in this phase (the study's defaults).
    gpu_hours = models.DecimalField(max_digits=10, decimal_places=2, default=Decimal("1000"))
    max_gpus = models.PositiveIntegerField(default=8)
    max_preemptible_gpus = models.PositiveIntegerField(default=8)
    max_job_hours = models.PositiveIntegerField(default=24)
    storage_gib = models.PositiveIntegerField(default=400)
    api_credit_usd = models.DecimalField(max_digits=10, decimal_places=2, default=Decimal("300"))

    class Meta:
        ordering = ["competition", "number"]
        constraints = [
            models.UniqueConstraint(fields=["competition", "number"], name="one_phase_per_number"),
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="phase_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.competition} {self.label} ({self.state})"

    def accepts_nominations(self, now: datetime) -> bool:
        """Nominations close at `ends_at` to the second, whenever the engine next ticks."""
        return self.state in {self.State.SCHEDULED, self.State.RUNNING} and now < self.ends_at
