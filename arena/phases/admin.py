from django.contrib import admin

from arena.admin_records import RecordAdmin
from arena.phases.models import (
    AgentStepFailure,
    FeedbackBundle,
    PhaseContestant,
    PhaseTransition,
    WorkerFailure,
)


@admin.register(PhaseContestant)
class PhaseContestantAdmin(admin.ModelAdmin):
    list_display = ["phase", "contestant", "role", "nomination", "checkpoint_path"]
    list_filter = ["phase", "role"]


@admin.register(PhaseTransition)
class PhaseTransitionAdmin(RecordAdmin):
    """The engine's record, as it happened."""

    list_display = ["phase", "from_state", "to_state", "at"]
    list_filter = ["phase"]


@admin.register(FeedbackBundle)
class FeedbackBundleAdmin(admin.ModelAdmin):
    list_display = ["phase", "agent", "source_phase", "battles", "delivered_at", "folder"]
    list_filter = ["phase"]
    readonly_fields = ["phase", "source_phase", "agent", "battles", "folder", "delivered_at"]


@admin.register(AgentStepFailure)
class AgentStepFailureAdmin(RecordAdmin):
    """An agent's step of a phase's start that failed; the engine retries it each tick."""

    list_display = ["phase", "agent", "step", "attempts", "last_failed_at", "resolved_at"]
    list_filter = ["phase", "step"]


@admin.register(WorkerFailure)
class WorkerFailureAdmin(RecordAdmin):
    list_display = ["task", "phase", "at", "last_at", "repeats", "error"]
    list_filter = ["task"]
