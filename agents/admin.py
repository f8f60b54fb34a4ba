from django.contrib import admin

from agents.models import Agent, AgentToken, ProxyCall, Upstream


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "active", "credit_limit", "credit_spent", "credit_reserved"]
    readonly_fields = ["credit_spent", "credit_reserved"]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["agent", "kind", "created_at", "revoked_at"]
    readonly_fields = ["agent", "kind", "digest", "created_at"]


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "base_url",
        "upstream_model",
        "usd_per_million_prompt_tokens",
        "usd_per_million_completion_tokens",
        "active",
    ]
    exclude = ["api_key"]  # set it from the shell or an environment-backed command, never shown


@admin.register(ProxyCall)
class ProxyCallAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "agent",
        "model",
        "stream",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "latency_ms",
    ]
    list_filter = ["status", "model"]
