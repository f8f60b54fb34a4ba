from django.apps import AppConfig


class BattlesConfig(AppConfig):
    name = "arena.battles"
    label = "battles"
    verbose_name = "Battles and votes"
