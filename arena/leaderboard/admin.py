from django.contrib import admin

from arena.leaderboard.models import RatingSnapshot


@admin.register(RatingSnapshot)
class RatingSnapshotAdmin(admin.ModelAdmin):
    list_display = ["id", "source", "n_battles", "ci_method", "created_at"]
    list_filter = ["source"]
    readonly_fields = [
        "source",
        "n_battles",
        "last_vote_at",
        "ci_method",
        "style",
        "raw",
        "analyses",
    ]
