"""Release both answers to the voter at one common pace, so how fast a model writes is not a
tell before the vote.

Streaming each side as its server writes it shows the voter each model's time to first token
and speed: a 1B model on its own GPU against a reference on another is recognisable before a
word is read. `PacedRelease` sits between the generation (`battle_run`) and the voter's socket:

* nothing is shown until every side has written something (or finished), so the first words
  of both sides appear together;
* both sides then advance through one display position P, in characters, at
  `chars_per_second`; side s shows its first min(P, written_s) characters;
* P never passes what an unfinished side has written: when a model falls behind the pace,
  both sides wait for it, so a stall does not say which side is slow;
* a side is "done" when P reaches the end of its finished answer: when it ends depends on its
  length, never on when its server finished.

What remains visible is the length of each answer, which the voter reads anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from arena.battles.generation import EventSink, GenerationEvent, SideDelta, SideFinished

TICK_S = 0.05  # how often the position moves: 20 frames a second per side at most


@dataclass
class _Side:
    written: str = ""
    shown: int = 0
    finished: SideFinished | None = None
    done_sent: bool = False


@dataclass
class PacedRelease:
    emit: EventSink
    chars_per_second: float
    sides: tuple[str, ...] = ("a", "b")
    clock: Callable[[], float] = time.monotonic
    _state: dict[str, _Side] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _generation_over: bool = False

    def __post_init__(self) -> None:
        self._state = {side: _Side() for side in self.sides}

    async def receive(self, event: GenerationEvent) -> None:
        """The generation's sink: keeps the event until the pace releases it."""
        side = self._state[event.side]
        if isinstance(event, SideDelta):
            side.written += event.text
        else:
            side.finished = event
            # What the server streamed and what was recorded can differ (a dropped chunk):
            # the recorded text is what the voter must end up reading.
            side.written = event.result.text or side.written
        self._changed.set()

    def generation_over(self) -> None:
        """No more events will come (the battle is recorded, or it failed)."""
        self._generation_over = True
        self._changed.set()

    async def run(self) -> None:
        """Release text until every side is done (or the generation ended without them)."""
        while not self._all_started():
            if self._generation_over:
                return
            await self._wait_for_change()
        position = 0.0
        last = self.clock()
        while True:
            now = self.clock()
            position = min(position + (now - last) * self.chars_per_second, self._ceiling())
            last = now
            await self._show(int(position))
            if all(s.done_sent for s in self._state.values()):
                return
            if self._generation_over and any(s.finished is None for s in self._state.values()):
                return  # a side never finished: the caller reports the failure
            await asyncio.sleep(TICK_S)

    async def flush(self) -> None:
        """Show every side's written text at once (no "done"): for a battle that failed and can
        no longer be voted on, where the pace hides nothing worth hiding."""
        for name, side in self._state.items():
            if len(side.written) > side.shown:
                await self.emit(SideDelta(name, side.written[side.shown :]))
                side.shown = len(side.written)

    def _all_started(self) -> bool:
        return all(s.written or s.finished for s in self._state.values())

    def _ceiling(self) -> float:
        """P may not pass what an unfinished side has written."""
        unfinished = [len(s.written) for s in self._state.values() if s.finished is None]
        return float(min(unfinished)) if unfinished else float("inf")

    async def _show(self, position: int) -> None:
        for name, side in self._state.items():
            target = min(position, len(side.written))
            if target > side.shown:
                await self.emit(SideDelta(name, side.written[side.shown : target]))
                side.shown = target
        for side in self._state.values():  # after every side's text: sides ending together do
            if side.finished and not side.done_sent and side.shown >= len(side.written):
                side.done_sent = True
                await self.emit(side.finished)

    async def _wait_for_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()
