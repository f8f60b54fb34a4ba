from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from agents.models import (
    Agent,
    AgentToken,
    Checkpoint,
    DataRecord,
    JournalEntry,
    Nomination,
    NomineeCopy,
    ProxyCall,
    TrajectoryDay,
    TrajectoryEvent,
    Upstream,
)
from arena.admin_records import RecordAdmin


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "active",
        "cluster_account",
        "credit_limit",
        "credit_spent",
        "credit_reserved",
        "scaffold_credit_limit",
        "scaffold_credit_spent",
        "scaffold_credit_reserved",
        "created_at",
    ]
    list_filter = ["active"]
    search_fields = ["name", "unix_user", "cluster_account__name"]
    # Provisioning (`manage.py agents provision`) sets these; the credit ledgers move only
    # through the proxy's conditional updates, and the scaffold's limit through
    # `agents scaffold-budget` (which refuses a limit below what is spent and reserved).
    readonly_fields = [
        "unix_user",
        "sandbox",
        "cluster_account",
        "credit_spent",
        "credit_reserved",
        "scaffold_credit_limit",
        "scaffold_credit_spent",
        "scaffold_credit_reserved",
    ]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["agent", "kind", "created_at", "revoked_at"]
    list_filter = ["kind", ("revoked_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["agent", "kind", "digest", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are minted by provisioning, which writes them to the sandbox


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "base_url",
        "upstream_model",
        "usd_per_million_prompt_tokens",
        "usd_per_million_completion_tokens",
        "max_completion_tokens",
        "active",
    ]
    list_filter = ["active"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    exclude = ["api_key"]  # set it from the shell or an environment-backed command, never shown


@admin.register(ProxyCall)
class ProxyCallAdmin(RecordAdmin):
    list_display = [
        "created_at",
        "agent",
        "budget",
        "model",
        "stream",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "reserved_usd",
        "cost_usd",
        "latency_ms",
        "error",
        "settled_at",
    ]
    list_filter = ["budget", "status", "model", "stream", "agent"]
    date_hierarchy = "created_at"


@admin.register(DataRecord)
class DataRecordAdmin(RecordAdmin):
    list_display = ["created_at", "agent", "path", "rows", "tokens", "licence"]
    list_filter = ["agent", "licence"]
    search_fields = ["path", "sha256", "reason"]
    date_hierarchy = "created_at"


@admin.register(Checkpoint)
class CheckpointAdmin(RecordAdmin):
    list_display = [
        "created_at",
        "agent",
        "path",
        "job",
        "parent",
        "architecture",
        "parameters",
        "end_of_turn_token",
    ]
    list_filter = ["agent", "architecture"]
    search_fields = ["path", "weights_sha256"]
    date_hierarchy = "created_at"


@admin.register(Nomination)
class NominationAdmin(RecordAdmin):
    """Kept as the agent wrote it, for the audit; agents change theirs through the API."""

    list_display = ["agent", "phase", "checkpoint", "created_at", "updated_at"]
    list_filter = ["phase", "agent"]
    search_fields = ["model_card"]


@admin.register(NomineeCopy)
class NomineeCopyAdmin(RecordAdmin):
    """The platform's copies of nominated checkpoints; made and checked by the phase engine."""

    list_display = ["nomination", "folder", "created_at", "not_servable_reason"]
    search_fields = ["folder", "weights_sha256", "not_servable_reason"]


@admin.register(JournalEntry)
class JournalEntryAdmin(RecordAdmin):
    """Read-only like every record; the database refuses changes too (migration 0006)."""

    list_display = ["created_at", "agent", "kind", "phase", "text"]
    list_filter = ["kind", "agent", "phase"]
    search_fields = ["text"]
    date_hierarchy = "created_at"


@admin.register(TrajectoryEvent)
class TrajectoryEventAdmin(RecordAdmin):
    """Organizers read an agent's trajectory here; PostgreSQL refuses any change anyway."""

    list_display = ["id", "created_at", "agent", "kind", "reported", "size"]
    list_filter = ["kind", "reported", "agent"]
    date_hierarchy = "created_at"


@admin.register(TrajectoryDay)
class TrajectoryDayAdmin(RecordAdmin):
    list_display = [
        "day",
        "agent",
        "events",
        "bytes",
        "reported_events",
        "reported_bytes",
        "model_dropped",
        "tool_dropped",
        "api_dropped",
        "reported_dropped",
        "dropped",
    ]
    list_filter = ["agent"]
