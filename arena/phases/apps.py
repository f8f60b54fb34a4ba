from django.apps import AppConfig


class PhasesConfig(AppConfig):
    name = "arena.phases"
    label = "phases"
    verbose_name = "Phase engine"
