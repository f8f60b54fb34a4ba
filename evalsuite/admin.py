from django.contrib import admin

from evalsuite.models import BenchmarkResult, EvalRun


class BenchmarkResultInline(admin.TabularInline):
    model = BenchmarkResult
    extra = 0
    fields = [
        "benchmark",
        "domain",
        "kind",
        "held_out",
        "score",
        "stderr",
        "n",
        "log_path",
        "error",
    ]
    readonly_fields = fields
    can_delete = False


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ["id", "phase", "model_label", "role", "agent", "state", "created_at"]
    list_filter = ["phase", "role", "state"]
    readonly_fields = ["job", "log_dir", "error", "finished_at"]
    inlines = [BenchmarkResultInline]
