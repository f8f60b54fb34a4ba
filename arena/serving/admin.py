from django.contrib import admin

from arena.serving.models import Contestant


@admin.register(Contestant)
class ContestantAdmin(admin.ModelAdmin):
    list_display = ["display_name", "served_model_name", "base_url", "active", "weight"]
    list_filter = ["active"]
    search_fields = ["display_name", "served_model_name"]
