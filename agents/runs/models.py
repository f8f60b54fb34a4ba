"""An agent run: one agent's scaffold, started, limited, restarted and stopped by the platform."""

from __future__ import annotations

from django.db import models

from agents.models import Agent
from arena.competition.models import Phase


class AgentRun(models.Model):
    """A run is a series of attempts; each attempt is one detached keeper process
    (agents/runs/keeper.py) that starts the scaffold, waits for it and records how it ended.
    The supervisor (agents/runs/services.py `runs_supervise`) decides what comes next."""

    class Harness(models.TextChoices):
        ARENA = "arena", "the platform's own harness"
        COMMAND = "command", "a command the organizers bring"

    class State(models.TextChoices):
        STARTING = "starting"  # waiting for its (next) attempt
        RUNNING = "running"  # an attempt is claimed; its keeper runs it
        FINISHED = "finished"  # exited 0
        FAILED = "failed"  # crashed more often than it may restart
        STOPPED = "stopped"  # stopped: by hand, at its deadline or at the phase's freeze

    UNFINISHED = (State.STARTING, State.RUNNING)

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    phase = models.ForeignKey(
        Phase, on_delete=models.SET_NULL, null=True, blank=True, related_name="agent_runs"
    )
    harness = models.CharField(max_length=16, choices=Harness.choices)
    model = models.CharField(max_length=100, blank=True, help_text="the upstream it calls")
    command = models.JSONField(default=list, blank=True, help_text="argv of a `command` harness")
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    attempts = models.PositiveIntegerField(default=0, help_text="attempts started so far")
    max_restarts = models.PositiveIntegerField(default=5)
    cpus = models.FloatField(default=2.0)
    memory_mib = models.PositiveIntegerField(default=8192)
    max_processes = models.PositiveIntegerField(default=512)
    deadline = models.DateTimeField(help_text="wall clock: the run is stopped then")
    limits_kind = models.CharField(max_length=16, blank=True, help_text="what enforced them")
    # The keeper of the current attempt, named by pid and by its start time in /proc (clock
    # ticks since boot), so a pid the kernel gave to another process is never taken for it.
    keeper_pid = models.PositiveIntegerField(null=True, blank=True)
    keeper_started = models.BigIntegerField(null=True, blank=True)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    attempt_ended_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True, help_text="of the last attempt")
    detail = models.TextField(blank=True, help_text="why it ended or restarted, in words")
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent"],
                condition=models.Q(state__in=["starting", "running"]),
                name="one_unfinished_run_per_agent",
            ),
            models.CheckConstraint(
                condition=models.Q(harness__in=["arena", "command"]), name="agent_run_harness_known"
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.agent_id} ({self.harness}, {self.state})"

    @property
    def finished(self) -> bool:
        return self.state not in self.UNFINISHED
