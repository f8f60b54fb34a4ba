from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    name = "arena.leaderboard"
    label = "leaderboard"
    verbose_name = "Leaderboard (ratings from counted votes)"

    def ready(self) -> None:
        from arena.leaderboard import signals  # noqa: F401  (connects the receivers)
