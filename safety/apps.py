from django.apps import AppConfig


class SafetyConfig(AppConfig):
    name = "safety"
    verbose_name = "Rule-violation audits"
