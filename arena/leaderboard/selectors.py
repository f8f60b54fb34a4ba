from __future__ import annotations

from arena.leaderboard.models import RatingSnapshot


def snapshot_latest(
    *, source: str | None = None, phase: str | None = None, category: str = ""
) -> RatingSnapshot | None:
    """The newest snapshot, of one source and/or one phase's battles (phase="" is all phases),
    of every battle or of one category's (`category`)."""
    snapshots = RatingSnapshot.objects.filter(category=category)
    if source is not None:
        snapshots = snapshots.filter(source=source)
    if phase is not None:
        snapshots = snapshots.filter(phase=phase)
    return snapshots.first()


def global_snapshot_latest() -> RatingSnapshot | None:
    """The newest fit of every counted vote — the public leaderboard. A phase's fit (saved
    when the phase closes) covers a subset of the votes and must never stand in for it."""
    return (
        RatingSnapshot.objects.filter(
            phase="",
            category="",
            source__in=[RatingSnapshot.Source.LIVE, RatingSnapshot.Source.COMMAND],
        )
        .order_by("-created_at", "-id")
        .first()
    )
