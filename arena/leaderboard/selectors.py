from __future__ import annotations

from arena.leaderboard.models import RatingSnapshot


def snapshot_latest(*, source: str | None = None) -> RatingSnapshot | None:
    snapshots = RatingSnapshot.objects.all()
    if source is not None:
        snapshots = snapshots.filter(source=source)
    return snapshots.first()
