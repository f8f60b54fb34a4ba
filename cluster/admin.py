from django.contrib import admin

from cluster.models import ClusterAccount, GpuLedger, Job, JobSegment


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "unix_user",
        "period",
        "gpu_hours_limit",
        "max_gpus",
        "submissions_blocked_reason",
    ]


@admin.register(GpuLedger)
class GpuLedgerAdmin(admin.ModelAdmin):
    list_display = ["account", "period", "gpu_seconds"]
    readonly_fields = ["account", "period", "gpu_seconds"]


class SegmentInline(admin.TabularInline):
    model = JobSegment
    extra = 0
    readonly_fields = ["started_at", "ended_at", "state", "gpus", "elapsed_seconds"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "scheduler_id",
        "backend",
        "account",
        "name",
        "qos",
        "gpus",
        "state",
        "reason",
        "submitted_at",
    ]
    list_filter = ["backend", "state", "qos"]
    search_fields = ["scheduler_id", "name"]
    inlines = [SegmentInline]
