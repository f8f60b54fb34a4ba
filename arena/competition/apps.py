from django.apps import AppConfig


class CompetitionConfig(AppConfig):
    name = "arena.competition"
    label = "competition"
    verbose_name = "Competition and phase records"
