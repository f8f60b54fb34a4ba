from __future__ import annotations

from arena.leaderboard.models import RatingSnapshot


def snapshot_latest(
    *, source: str | None = None, phase: str | None = None
) -> RatingSnapshot | None:
    """The newest snapshot, of one source and/or one phase's battles (phase="" is all phases)."""
    snapshots = RatingSnapshot.objects.all()
    if source is not None:
        snapshots = snapshots.filter(source=source)
    if phase is not None:
        snapshots = snapshots.filter(phase=phase)
    return snapshots.first()
