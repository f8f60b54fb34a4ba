"""Accounts that run jobs under limits, their jobs, and the GPU-time ledger.

The cluster knows nothing of agents or phases: an account is a name with a Unix user and
limits; a "period" is an opaque label (the phase) that usage is booked against.
"""

from __future__ import annotations

from django.db import models


class ClusterAccount(models.Model):
    name = models.CharField(max_length=64, unique=True, help_text="the Slurm account")
    unix_user = models.CharField(max_length=64, help_text="the only user that submits under it")
    period = models.CharField(max_length=64, blank=True, help_text="budget period in force")
    gpu_hours_limit = models.DecimalField(max_digits=12, decimal_places=3)
    max_gpus = models.PositiveIntegerField(help_text="GPUs at once on the normal QOS")
    max_preemptible_gpus = models.PositiveIntegerField(
        help_text="GPUs at once on the preemptible QOS"
    )
    max_job_hours = models.PositiveIntegerField()
    platform = models.BooleanField(
        default=False, help_text="the organizers' own account (evaluation, serving)"
    )
    storage_gib_limit = models.PositiveIntegerField()
    storage_path = models.CharField(
        max_length=1000, blank=True, help_text="the directory measured against the storage quota"
    )
    storage_bytes_used = models.BigIntegerField(default=0)
    storage_measured_at = models.DateTimeField(null=True, blank=True)
    # Two independent reasons not to accept jobs, each shown as is. Only `storage_measure`
    # sets or lifts the storage one, so going back under the quota never reopens an account
    # that was closed for another reason.
    submissions_blocked_reason = models.CharField(
        max_length=300, blank=True, help_text="closed by the organizers (deprovisioned, ...)"
    )
    storage_blocked_reason = models.CharField(
        max_length=300, blank=True, help_text="over the storage quota"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def blocked_reason(self) -> str:
        """Why the account may not submit now, in words; "" when it may."""
        return "; ".join(
            r for r in (self.submissions_blocked_reason, self.storage_blocked_reason) if r
        )


class GpuLedger(models.Model):
    """GPU-seconds charged to an account in a period. Only `ledger_charge` changes it, with
    an atomic F() update in the same transaction that records the segment it charges."""

    account = models.ForeignKey(ClusterAccount, on_delete=models.CASCADE, related_name="ledgers")
    period = models.CharField(max_length=64)
    gpu_seconds = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "period"], name="one_ledger_per_period")
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.period}: {self.gpu_seconds / 3600:.2f} GPU-h"


class Job(models.Model):
    class State(models.TextChoices):
        PENDING = "PENDING"
        RUNNING = "RUNNING"
        REQUEUED = "REQUEUED"
        COMPLETED = "COMPLETED"
        FAILED = "FAILED"
        CANCELLED = "CANCELLED"
        TIMEOUT = "TIMEOUT"
        PREEMPTED = "PREEMPTED"
        NODE_FAIL = "NODE_FAIL"
        OUT_OF_MEMORY = "OUT_OF_MEMORY"
        REFUSED = "REFUSED"  # never accepted by the scheduler

    FINISHED = {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "REFUSED",
    }

    account = models.ForeignKey(ClusterAccount, on_delete=models.PROTECT, related_name="jobs")
    period = models.CharField(max_length=64, blank=True)
    backend = models.CharField(max_length=16)
    scheduler_id = models.CharField(max_length=32, db_index=True, help_text="the Slurm job id")
    name = models.CharField(max_length=100)
    qos = models.CharField(max_length=32)
    nodes = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField(help_text="GPUs in total")
    time_limit_minutes = models.PositiveIntegerField()
    workdir = models.CharField(max_length=1000)
    script = models.TextField()
    stdout_path = models.CharField(max_length=1000)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=300, blank=True, help_text="why it waits, in words")
    exit_code = models.CharField(max_length=16, blank=True)
    requeues = models.PositiveIntegerField(default=0)
    gpu_seconds_charged = models.BigIntegerField(default=0)
    local_pid = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["backend", "scheduler_id"], name="one_row_per_scheduler_job"
            )
        ]

    def __str__(self) -> str:
        return f"{self.backend} job {self.scheduler_id} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED


class JobSegment(models.Model):
    """One run of a job from start to end: a requeued job has several. Each is charged once."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="segments")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    state = models.CharField(max_length=16)
    gpus = models.PositiveIntegerField()
    elapsed_seconds = models.PositiveIntegerField()

    class Meta:
        ordering = ["job", "started_at"]
        constraints = [
            models.UniqueConstraint(fields=["job", "started_at"], name="one_charge_per_segment")
        ]

    def __str__(self) -> str:
        return f"{self.job.scheduler_id} {self.started_at:%H:%M:%S} {self.state}"

    @property
    def gpu_seconds(self) -> int:
        return self.gpus * self.elapsed_seconds
