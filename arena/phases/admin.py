from django.contrib import admin

from arena.phases.models import FeedbackBundle, PhaseContestant, PhaseTransition


@admin.register(PhaseContestant)
class PhaseContestantAdmin(admin.ModelAdmin):
    list_display = ["phase", "contestant", "role", "nomination", "checkpoint_path"]
    list_filter = ["phase", "role"]


@admin.register(PhaseTransition)
class PhaseTransitionAdmin(admin.ModelAdmin):
    """The engine's record: read-only, as it happened."""

    list_display = ["phase", "from_state", "to_state", "at"]
    list_filter = ["phase"]

    def has_add_permission(self, request, obj=None):  # noqa: ANN001, ANN201
        return False

    def has_change_permission(self, request, obj=None):  # noqa: ANN001, ANN201
        return False


@admin.register(FeedbackBundle)
class FeedbackBundleAdmin(admin.ModelAdmin):
    list_display = ["phase", "agent", "source_phase", "battles", "delivered_at", "folder"]
    list_filter = ["phase"]
    readonly_fields = ["phase", "source_phase", "agent", "battles", "folder", "delivered_at"]
