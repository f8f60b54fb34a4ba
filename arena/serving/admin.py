from django.contrib import admin
from django.db import models

from arena.serving.models import Contestant, ServingEvent


@admin.register(Contestant)
class ContestantAdmin(admin.ModelAdmin):
    list_display = [
        "display_name",
        "served_model_name",
        "base_url",
        "checkpoint_path",
        "active",
        "weight",
        "created_at",
    ]
    list_filter = ["active"]
    list_editable = ["active", "weight"]
    search_fields = ["display_name", "served_model_name", "checkpoint_path"]
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}  # local model servers


@admin.register(ServingEvent)
class ServingEventAdmin(admin.ModelAdmin):
    list_display = ["at", "contestant", "kind", "reason", "detail"]
    list_filter = ["kind"]
    search_fields = ["contestant__display_name", "reason", "detail"]
    readonly_fields = ["at", "contestant", "kind", "reason", "detail"]
