from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "arena.serving"
    label = "serving"
    verbose_name = "Serving (contestants and their model servers)"
