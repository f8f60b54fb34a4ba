from django.contrib import admin

from safety.models import Finding, JudgeReview
from safety.services import finding_set_status


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ["created_at", "agent", "phase", "kind", "severity", "status", "summary"]
    list_filter = ["status", "kind", "severity", "phase"]
    search_fields = ["agent__name", "summary"]
    readonly_fields = [
        "agent",
        "phase",
        "kind",
        "severity",
        "summary",
        "evidence",
        "fingerprint",
        "created_at",
        "updated_at",
        "last_seen_at",
    ]
    fields = ["status", "note", *readonly_fields]
    actions = ["confirm", "dismiss", "reopen"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # findings come from the audit

    @admin.action(description="Confirm: a violation (benchmark results become the base model's)")
    def confirm(self, request, queryset) -> None:
        for finding in queryset:
            finding_set_status(finding=finding, status=Finding.Status.CONFIRMED)

    @admin.action(description="Dismiss: not a violation")
    def dismiss(self, request, queryset) -> None:
        for finding in queryset:
            finding_set_status(finding=finding, status=Finding.Status.DISMISSED)

    @admin.action(description="Reopen")
    def reopen(self, request, queryset) -> None:
        for finding in queryset:
            finding_set_status(finding=finding, status=Finding.Status.OPEN)


@admin.register(JudgeReview)
class JudgeReviewAdmin(admin.ModelAdmin):
    list_display = ["created_at", "agent", "judge", "violation"]
    readonly_fields = ["agent", "judge", "digest", "violation", "verdict", "created_at"]
