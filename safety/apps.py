from django.apps import AppConfig


class SafetyConfig(AppConfig):
    name = "safety"
    verbose_name = "Rule-violation audits"

    def ready(self) -> None:
        # evalsuite replaces a confirmed violator's results with the base model's; it learns
        # who from here, so that the dependency points from safety to evalsuite, never back.
        from evalsuite.replacements import replacement_source_register
        from safety.selectors import confirmed_violations

        replacement_source_register(confirmed_violations)
