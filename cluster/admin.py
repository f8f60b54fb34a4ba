from django.contrib import admin
from django.http import HttpRequest

from arena.admin_records import RecordAdmin
from cluster.models import ClusterAccount, GpuLedger, Job, JobSegment


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "unix_user",
        "period",
        "gpu_hours_limit",
        "max_gpus",
        "max_preemptible_gpus",
        "max_job_hours",
        "storage_gib_limit",
        "submissions_blocked_reason",
    ]
    search_fields = ["name", "unix_user"]
    # Limits live on the Slurm association too: change them with the services (the phase
    # engine, `manage.py cluster`), which update both; here they are shown.
    readonly_fields = [
        "name",
        "unix_user",
        "period",
        "gpu_hours_limit",
        "max_gpus",
        "max_preemptible_gpus",
        "max_job_hours",
        "storage_gib_limit",
        "storage_bytes_used",
        "storage_measured_at",
        "submissions_blocked_reason",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # accounts are created by provisioning, with their Slurm association


@admin.register(GpuLedger)
class GpuLedgerAdmin(RecordAdmin):
    list_display = ["account", "period", "gpu_seconds", "gpu_hours"]
    list_filter = ["period"]

    @admin.display(description="GPU-hours")
    def gpu_hours(self, ledger: GpuLedger) -> str:
        return f"{ledger.gpu_seconds / 3600:.2f}"


class SegmentInline(admin.TabularInline):
    model = JobSegment
    extra = 0
    readonly_fields = ["started_at", "ended_at", "state", "gpus", "elapsed_seconds"]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(RecordAdmin):
    list_display = [
        "scheduler_id",
        "backend",
        "account",
        "period",
        "name",
        "qos",
        "gpus",
        "state",
        "reason",
        "gpu_hours_charged",
        "submitted_at",
    ]
    list_filter = ["backend", "state", "qos", "period", "account"]
    search_fields = ["scheduler_id", "name"]
    date_hierarchy = "submitted_at"
    inlines = [SegmentInline]

    @admin.display(description="GPU-h charged")
    def gpu_hours_charged(self, job: Job) -> str:
        return f"{job.gpu_seconds_charged / 3600:.2f}"


@admin.register(JobSegment)
class JobSegmentAdmin(RecordAdmin):
    list_display = ["job", "started_at", "ended_at", "state", "gpus", "elapsed_seconds"]
    list_filter = ["state"]
    search_fields = ["job__scheduler_id"]
