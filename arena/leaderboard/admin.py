from django.contrib import admin
from django.http import HttpRequest

from arena.leaderboard.models import RatingSnapshot, RefitLease


class RecordAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(RatingSnapshot)
class RatingSnapshotAdmin(RecordAdmin):
    """Fits as they were published; old ones may be deleted, none edited."""

    list_display = ["id", "source", "phase", "n_battles", "ci_method", "last_vote_at", "created_at"]
    list_filter = ["source", "phase", "ci_method"]
    date_hierarchy = "created_at"
    exclude = ["warm_start"]


@admin.register(RefitLease)
class RefitLeaseAdmin(RecordAdmin):
    """Who holds the live refit now (a stuck lease expires by itself)."""

    list_display = ["id", "holder", "held_until"]

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
