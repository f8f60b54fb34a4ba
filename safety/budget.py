"""What the audit may spend on one agent's files in one run; no Django here.

Each agent gets its own `Budget` (seconds, bytes read, entries walked; `safety.audits.recording`
sets it from the settings), spent only while a pass reads that agent's files (paused between:
the other agents' scans cost it nothing). Every read of the agent's files charges it: the walk an entry at a
time, a file the bytes it produces (decompressed: what the scan pays for), a Parquet or Arrow
reader the text it sends back (and it is stopped at the deadline). Once one bound is passed,
every later charge raises `BudgetSpent`, so the rest of that agent's files is left unread and
the audit moves on to the next agent: one agent can delay another by its own budget at most.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import BinaryIO

BLOCK = 1 << 16


class BudgetSpent(Exception):
    """The agent's budget for this run is spent: nothing more of its files is read."""


@dataclass
class Budget:
    seconds: float
    bytes: int
    entries: int
    started: float = field(default_factory=lambda: time.monotonic())  # less time paused
    paused_at: float | None = None  # while no pass reads the agent's files, time is not spent
    bytes_read: int = 0
    entries_walked: int = 0
    files_read: int = 0
    at: object = None  # the last entry walked or file read: where the audit stood
    limit: str = ""  # the bound that stopped it ("seconds", "bytes", "entries"); "" until then

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def elapsed(self) -> float:
        return (self.paused_at or time.monotonic()) - self.started

    def pause(self) -> None:
        if self.paused_at is None:
            self.paused_at = time.monotonic()

    def resume(self) -> None:
        if self.paused_at is not None:
            self.started += time.monotonic() - self.paused_at
            self.paused_at = None

    def check(self) -> None:
        if self.limit:
            raise BudgetSpent(self.describe())
        if time.monotonic() > self.deadline:
            self._stop("seconds")

    def read(self, nbytes: int) -> None:
        self.bytes_read += nbytes
        if self.bytes_read > self.bytes:
            self._stop("bytes")
        self.check()

    def entry(self, where: object) -> None:
        self.check()
        if self.entries_walked >= self.entries:
            self._stop("entries")
        self.entries_walked += 1
        self.at = where

    def describe(self) -> str:
        bound = {"seconds": f"{self.seconds:g} s", "bytes": f"{self.bytes} bytes read"}
        return f"the audit's budget of {bound.get(self.limit, f'{self.entries} entries walked')} is spent"

    def _stop(self, limit: str) -> None:
        self.limit = self.limit or limit
        raise BudgetSpent(self.describe())


class _Metered(io.RawIOBase):
    def __init__(self, stream: BinaryIO, budget: Budget) -> None:
        self._stream = stream
        self._budget = budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._stream.read(min(len(buffer), BLOCK))
        self._budget.read(len(chunk))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def metered(stream: BinaryIO, budget: Budget | None) -> BinaryIO:
    """`stream`, each block read charged to `budget` (unchanged without one)."""
    if budget is None:
        return stream
    return io.BufferedReader(_Metered(stream, budget), buffer_size=BLOCK)  # type: ignore[return-value]
