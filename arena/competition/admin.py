from django.contrib import admin

from arena.competition.models import Competition, CompetitionAgent, Phase


class PhaseInline(admin.TabularInline):
    model = Phase
    extra = 0
    fields = ["number", "label", "state", "starts_at", "ends_at", "feedback"]
    readonly_fields = ["state"]
    show_change_link = True


@admin.register(Competition)
class CompetitionAdmin(admin.ModelAdmin):
    list_display = ["name", "base_model", "instruct_model", "created_at"]
    search_fields = ["name"]
    inlines = [PhaseInline]


@admin.register(CompetitionAgent)
class CompetitionAgentAdmin(admin.ModelAdmin):
    list_display = ["competition", "name", "harness", "model", "scaffold_budget_usd"]
    list_filter = ["competition", "harness"]


@admin.register(Phase)
class PhaseAdmin(admin.ModelAdmin):
    list_display = [
        "competition",
        "number",
        "label",
        "state",
        "starts_at",
        "ends_at",
        "feedback",
        "gpu_hours",
        "api_credit_usd",
    ]
    list_filter = ["state", "competition", "feedback"]
    fieldsets = [
        (None, {"fields": ["competition", "number", "label", "state", "feedback"]}),
        ("Calendar", {"fields": ["starts_at", "ends_at"]}),
        (
            "Per-agent budgets",
            {
                "fields": [
                    "gpu_hours",
                    "max_gpus",
                    "max_preemptible_gpus",
                    "max_job_hours",
                    "storage_gib",
                    "api_credit_usd",
                ]
            },
        ),
    ]
    # The state moves only through `manage.py phases tick`, which does each transition once.
    readonly_fields = ["state"]
