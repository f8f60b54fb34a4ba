"""Evaluation runs and their results.

An `EvalRun` is one cluster job: one model (an agent's checkpoint, or the base or instruct
reference) on a batch of benchmarks in a phase. Its `BenchmarkResult`s and `ItemResult`s are
written once, when the finished job is collected.
"""

from __future__ import annotations

from django.db import models


class EvalRun(models.Model):
    class Role(models.TextChoices):
        AGENT = "agent"  # an agent's checkpoint
        BASE = "base"  # the competition's base model (the 0 of gap closed)
        INSTRUCT = "instruct"  # the instruct reference (the 1 of gap closed)

    class State(models.TextChoices):
        QUEUED = "queued"  # submitted; the job has not finished
        DONE = "done"  # collected, results stored
        FAILED = "failed"  # the job failed or returned nothing usable
        CANCELLED = "cancelled"  # its agent cancelled it before it finished (on demand)

    phase = models.ForeignKey(
        "competition.Phase", on_delete=models.PROTECT, related_name="eval_runs"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    agent = models.ForeignKey(
        "agents.Agent", null=True, blank=True, on_delete=models.PROTECT, related_name="eval_runs"
    )
    checkpoint = models.ForeignKey(
        "agents.Checkpoint",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="eval_runs",
    )
    contestant = models.ForeignKey(
        "serving.Contestant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="eval_runs",
    )
    model_label = models.CharField(max_length=200, help_text="who was evaluated, for reports")
    base_url = models.URLField(max_length=500)
    served_model_name = models.CharField(max_length=500)
    benchmarks = models.JSONField(help_text="the benchmark names in this batch")
    judge_model = models.CharField(
        max_length=300,
        blank=True,
        help_text="the model behind the judge upstream when the run was queued (none: no judge)",
    )
    fortress_judges = models.JSONField(
        default=list,
        blank=True,
        help_text="the models behind FORTRESS's panel of judge upstreams when the run was "
        "queued (empty: the judge alone)",
    )
    job = models.ForeignKey(
        "cluster.Job", null=True, blank=True, on_delete=models.PROTECT, related_name="eval_runs"
    )
    requested_by_agent = models.BooleanField(
        default=False,
        help_text="queued by the agent itself (on demand, proxy benchmarks, its own account)",
    )
    judge_token = models.ForeignKey(
        "agents.AgentToken",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="an on-demand run's judge token (billing its agent), revoked when it ends",
    )
    copy_bytes = models.BigIntegerField(
        default=0,
        help_text="an on-demand run's copy of its checkpoint on the platform's disk, in bytes: "
        "counted against its agent's storage quota until the run ends",
    )
    log_dir = models.CharField(max_length=1000)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["phase", "created_at"]

    def __str__(self) -> str:
        return f"eval {self.pk} {self.model_label} ({self.state})"


class BenchmarkResult(models.Model):
    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    benchmark = models.CharField(max_length=64)
    domain = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)  # capability / safety
    held_out = models.BooleanField(help_text="organizers only until the competition ends")
    score = models.FloatField(null=True, help_text="mean over items; null if it did not run")
    stderr = models.FloatField(
        null=True, help_text="standard error of the mean: sample stdev of the items / √n"
    )
    n = models.PositiveIntegerField(help_text="items scored")
    judge_model = models.CharField(
        max_length=300,
        blank=True,
        help_text="the models that graded (judge-graded benchmarks), as the report names them",
    )
    judges = models.JSONField(
        default=list, blank=True, help_text="each model that graded (FORTRESS: its panel)"
    )
    log_path = models.CharField(max_length=1000, blank=True, help_text="inspect's log file")
    error = models.TextField(blank=True)
    metrics = models.JSONField(
        default=dict,
        blank=True,
        help_text="the benchmark's own aggregates beside its score (BBQ's bias scores): "
        "name -> {score, stderr, n}",
    )

    class Meta:
        ordering = ["run", "benchmark"]
        constraints = [
            models.UniqueConstraint(fields=["run", "benchmark"], name="one_result_per_benchmark")
        ]

    def __str__(self) -> str:
        return f"{self.run.model_label} {self.benchmark}: {self.score}"


class ItemResult(models.Model):
    result = models.ForeignKey(BenchmarkResult, on_delete=models.CASCADE, related_name="items")
    item_id = models.CharField(max_length=100)
    value = models.FloatField()
    answer = models.TextField(blank=True)
    explanation = models.TextField(blank=True)

    class Meta:
        ordering = ["result", "item_id"]

    def __str__(self) -> str:
        return f"{self.result} {self.item_id}={self.value}"
