from django.contrib import admin

from agents.runs.models import AgentRun
from arena.admin_records import RecordAdmin


@admin.register(AgentRun)
class AgentRunAdmin(RecordAdmin):
    """Runs change only through `agents run|stop` and the supervisor: shown, never edited."""

    list_display = [
        "pk",
        "agent",
        "phase",
        "harness",
        "state",
        "attempts",
        "deadline",
        "created_at",
    ]
    list_filter = ["state", "harness"]
    search_fields = ["agent__name"]
