"""The live refit's battles, kept in the refitting process and topped up with the new votes.

A full read of a million counted votes (`counted_table`: one binary COPY) takes seconds,
most of them PostgreSQL's; the live board refits every second. So the process that refits
keeps the columns it read (`_Inputs`: one float row per vote, as `counted_table` gives them)
and at each refit reads only the votes of the last `OVERLAP` before the newest vote it holds,
adding those it does not hold yet. All the queries of one refit run in one REPEATABLE READ
transaction on PostgreSQL, so they see the same votes.

Why the overlap: a vote's `created_at` is set when it is inserted, not when it commits, so a
vote can become visible after a newer one was read. The votes of the overlap window are
kept by battle id, and a late vote in the window is added then.

The result is the full read's, exactly (same rows, perhaps in another order), because the
inputs are thrown away and read in full whenever they could be wrong:
- the count of votes in the fit differs from the rows held (a vote committed later than the
  overlap, a vote deleted or no longer counted);
- the exclusions in force changed, or `RefitLease.inputs_generation` moved (signals.py: a
  fitted vote, its battle, an answer or a contestant's name changed after the fact);
- the oldest vote in the fit is another one (the table was emptied and refilled: tests);
- `FULL_READ_SECONDS` passed since the last full read (changes made behind Django's back,
  `QuerySet.update` or raw SQL, are then picked up within that time).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, Max
from numpy.typing import NDArray

from arena.battles.selectors import exclusions_in_force, votes_in_fit
from arena.leaderboard.inputs import (
    TABLE_WIDTH,
    battles_of_table,
    counted_rows,
    counted_table,
    groups_of_table,
)
from arena.leaderboard.models import RefitLease
from arena.rating import Battles

# A vote committed more than this after its `created_at` is not in the window: the count
# check then finds it missing and the next refit reads everything.
OVERLAP = timedelta(seconds=10)
FULL_READ_SECONDS = 300.0


@dataclass
class _Inputs:
    key: tuple[object, ...]  # what must not change for the rows to stay right
    table: NDArray[np.float64]  # (capacity, TABLE_WIDTH); the first `n` rows are votes
    n: int
    votes: int  # votes held: the rows, and any vote whose battle lacks an answer (no row)
    last_vote_at: datetime
    recent: dict[str, datetime]  # battle id -> vote time, of the votes in the overlap window
    contestant_ids: set[int] = field(default_factory=set)
    read_at: float = field(default_factory=time.monotonic)

    def rows(self) -> NDArray[np.float64]:
        return self.table[: self.n]

    def append(self, rows: NDArray[np.float64]) -> None:
        if self.n + len(rows) > len(self.table):
            grown = np.empty((max(len(self.table) * 3 // 2, self.n + len(rows)), TABLE_WIDTH))
            grown[: self.n] = self.table[: self.n]
            self.table = grown
        self.table[self.n : self.n + len(rows)] = rows
        self.n += len(rows)
        self.contestant_ids.update(np.unique(rows[:, :2]).astype(np.int64).tolist())


@dataclass(frozen=True)
class LiveBattles:
    battles: Battles
    groups: NDArray[np.int64]  # each battle's prompt group (inputs.groups_of_table)
    last_vote_at: datetime
    read: str  # "full" or "new votes": how this refit read them (the bench prints it)
    votes_read: int  # rows read from the database this time


_lock = threading.Lock()  # one refit at a time per process (the lease: one across processes)
_inputs: _Inputs | None = None


def live_battles() -> LiveBattles | None:
    """Every vote in the fit as battles, as `counted_battles()` gives them, reading only the
    votes since the previous call where that is safe (see the module's docstring). None: no
    votes in the fit."""
    global _inputs
    with _lock, _snapshot():
        # Held again only once this read has succeeded: an error halfway through (the
        # database gone) must not leave rows added without the votes that account for them.
        held, _inputs = _inputs, None
        votes = votes_in_fit()
        watermark = votes.aggregate(n=Count("pk"), last=Max("created_at"))
        if watermark["n"] == 0:
            return None
        last: datetime = watermark["last"]
        key = _key()
        added = None
        if (
            held is not None
            and held.key == key
            and time.monotonic() - held.read_at < FULL_READ_SECONDS
        ):
            added = _new_votes(held, last)
            if held.votes != watermark["n"]:
                added = None  # a vote later than the overlap, or one gone: read them all
        if added is None:
            held = _full_read(key, last, watermark["n"])
            read, votes_read = "full", held.n
        else:
            read, votes_read = "new votes", added
        _inputs = held
        if held.n == 0:  # type: ignore[union-attr]  # held is set whenever added is not None
            return None
        rows = held.rows()  # type: ignore[union-attr]  # held is set whenever added is not None
        battles = battles_of_table(rows, np.array(sorted(held.contestant_ids)))  # type: ignore[union-attr]  # held is set whenever added is not None
        return LiveBattles(battles, groups_of_table(rows), last, read, votes_read)


def live_inputs_forget() -> None:
    """Drop what this process holds: the next refit reads every vote."""
    global _inputs
    with _lock:
        _inputs = None


def _key() -> tuple[object, ...]:
    generation = RefitLease.objects.filter(id=1).values_list("inputs_generation", flat=True)
    first = votes_in_fit().order_by("created_at", "battle_id").values_list("battle_id", flat=True)
    return (
        tuple(exclusions_in_force().values_list("pk", flat=True)),
        generation.first(),
        first.first(),
    )


def _full_read(key: tuple[object, ...], last: datetime, votes: int) -> _Inputs:
    table = counted_table(votes_in_fit().filter(created_at__lte=last))
    room = np.empty((len(table) + len(table) // 4 + 1024, TABLE_WIDTH))  # for new votes
    inputs = _Inputs(key, room, 0, votes, last, _recent(last))
    inputs.append(table)
    return inputs


def _new_votes(held: _Inputs, last: datetime) -> int:
    """Add the votes up to `last` that `held` lacks, of the overlap window before its newest
    vote; the number of rows added."""
    since = held.last_vote_at - OVERLAP
    window = votes_in_fit().filter(created_at__gt=since, created_at__lte=last)
    in_window = dict(window.values_list("battle_id", "created_at"))
    fresh = [battle_id for battle_id in in_window if battle_id not in held.recent]
    added = 0
    if fresh:
        rows = counted_rows(votes_in_fit().filter(battle_id__in=fresh), "battle_id")
        new_rows = [row[1:] for row in rows]
        if new_rows:
            held.append(np.array(new_rows, dtype=np.float64))
        added = len(new_rows)
    held.votes += len(fresh)
    held.recent.update(in_window)
    held.last_vote_at = max(held.last_vote_at, last)
    cutoff = held.last_vote_at - OVERLAP
    held.recent = {b: at for b, at in held.recent.items() if at > cutoff}
    return added


def _recent(last: datetime) -> dict[str, datetime]:
    window = votes_in_fit().filter(created_at__gt=last - OVERLAP, created_at__lte=last)
    return dict(window.values_list("battle_id", "created_at"))


class _snapshot:
    """One transaction whose queries all see the same committed votes: REPEATABLE READ on
    PostgreSQL (SQLite's transactions already are). Inside a caller's transaction (tests)
    that transaction is the snapshot."""

    def __enter__(self) -> None:
        self._atomic = None
        if not connection.in_atomic_block:
            self._atomic = transaction.atomic()
            self._atomic.__enter__()
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def __exit__(self, *exc: object) -> None:
        if self._atomic is not None:
            self._atomic.__exit__(*exc)
