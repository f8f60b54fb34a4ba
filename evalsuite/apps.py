from django.apps import AppConfig


class EvalsuiteConfig(AppConfig):
    name = "evalsuite"
    verbose_name = "Evaluation suite"
