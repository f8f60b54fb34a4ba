from django.contrib import admin

from arena.competition.models import Competition, Phase


class PhaseInline(admin.TabularInline):
    model = Phase
    extra = 0


@admin.register(Competition)
class CompetitionAdmin(admin.ModelAdmin):
    list_display = ["name", "base_model", "created_at"]
    inlines = [PhaseInline]


@admin.register(Phase)
class PhaseAdmin(admin.ModelAdmin):
    list_display = ["competition", "number", "label", "state", "starts_at", "ends_at", "feedback"]
    list_filter = ["state"]
