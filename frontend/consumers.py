"""The battle socket: streams both answers of one battle, side by side, as they are written.

Frames carry a side ("a"/"b") and text, never a contestant. A battle streams once; opening
the socket of a finished battle replays the stored answers.

Both sides are released at one common pace (`arena/battles/pacing.py`,
`ARENA_STREAM_CHARS_PER_SECOND`), so a model's speed is not a tell either.

Before the vote, a side's status is the same whoever wrote it: "done", or the one failure
text. A finish reason ("length": a base model that never stops) or a server's error message
would tell one contestant from another, so neither leaves the server: both are stored with
the answer, and the vote's reply reveals the names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from arena.battles.generation import (
    EventSink,
    GenerationEvent,
    SideDelta,
    SideFinished,
    battle_run,
)
from arena.battles.models import Battle
from arena.battles.pacing import PacedRelease
from arena.battles.selectors import battle_for_voter, battle_turns
from arena.battles.services import SideResult
from arena.competition.selectors import ArenaSettings, arena_settings_current
from arena.leaderboard.live import (
    screen_closed,
    screen_opened,
    table_for_new_screen,
    table_shown,
)
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import snapshot_latest
from arena.leaderboard.services import LIVE_GROUP, live_payload
from frontend.markdown import render_markdown
from frontend.voters import voter_key_or_none

log = logging.getLogger(__name__)

# The only failure texts a voter sees before voting: the same for every contestant.
SIDE_FAILED = "This model failed to answer."
SIDE_INTERRUPTED = "This answer was interrupted."


class BattleConsumer(AsyncJsonWebsocketConsumer):
    task: asyncio.Task[None] | None = None
    arena: ArenaSettings  # read once per battle, when its socket opens

    async def connect(self) -> None:
        battle_id = self.scope["url_route"]["kwargs"]["battle_id"]
        # One trip to the database for what the whole battle needs: each trip is a thread hop
        # and a new database connection, the bulk of a worker's CPU per battle once the model
        # client was shared (bench/README.md).
        battle, self.arena = await database_sync_to_async(_battle_and_settings)(
            self.scope.get("session"), battle_id
        )
        if battle is None:
            await self.close(code=4404)
            return
        await self.accept()
        # The prompt being answered: frames about a follow-up (turn 2, 3, …) say which turn.
        self.turn: int = battle.turns
        # What this socket has shown so far, so a failure can close the sides still writing.
        self.shown: dict[str, list[str]] = {side: [] for side in ("a", "b")}
        self.sides_done: set[str] = set()
        self.task = asyncio.create_task(self._stream_or_replay(battle))

    async def disconnect(self, code: int) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task

    async def _stream_or_replay(self, battle: Battle) -> None:
        if battle.state == Battle.State.CREATED:
            release = _paced_release(self._forward, self.arena.stream_chars_per_second)
            releasing = asyncio.create_task(release.run()) if release else None
            try:
                finished = await battle_run(
                    battle.pk, release.receive if release else self._forward
                )
                if release is not None:
                    release.generation_over()
                    await releasing  # type: ignore[misc]  # set together with release
            except Exception:
                # battle_run has marked the battle failed; the voter must hear so too, or the
                # page shows "Writing…" forever.
                log.exception("battle %s failed while its answers were generated", battle.pk)
                if releasing is not None:
                    releasing.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await releasing
                    await release.flush()  # type: ignore[union-attr]  # the page shows what was written before the break
                await self._send_generation_failed()
                return
            finally:
                if releasing is not None and not releasing.done():
                    releasing.cancel()
            if finished is not None:
                await self._send_battle_done(votable=finished.state == Battle.State.COMPLETE)
                return
            battle = await database_sync_to_async(Battle.objects.get)(pk=battle.pk)
        if battle.state == Battle.State.GENERATING:
            await self.send_json(
                {"type": "error", "message": "This battle is already streaming in another window."}
            )
            await self.close()
            return
        for turn, results in await database_sync_to_async(_stored_turns)(battle):
            self.turn = turn
            for side, result in results:
                await self._forward(SideFinished(side, result))
        await self._send_battle_done(votable=battle.state == Battle.State.COMPLETE)

    async def _forward(self, event: GenerationEvent) -> None:
        if isinstance(event, SideDelta):
            self.shown[event.side].append(event.text)
            await self._send_turn_frame({"type": "delta", "side": event.side, "text": event.text})
            return
        self.sides_done.add(event.side)
        result = event.result
        await self._send_turn_frame(
            {
                "type": "side_done",
                "side": event.side,
                "html": render_markdown(result.text),
                "error": SIDE_FAILED if result.error else "",
            }
        )

    async def _send_turn_frame(self, frame: dict[str, Any]) -> None:
        # A first turn's frames are as they always were; a follow-up's name their turn.
        if self.turn > 1:
            frame["turn"] = self.turn
        await self.send_json(frame)

    async def _send_generation_failed(self) -> None:
        for side in sorted(set(self.shown) - self.sides_done):
            await self._send_turn_frame(
                {
                    "type": "side_done",
                    "side": side,
                    "html": render_markdown("".join(self.shown[side])),
                    "error": SIDE_INTERRUPTED,
                }
            )
        await self._send_battle_done(votable=False)

    async def _send_battle_done(self, *, votable: bool) -> None:
        frame: dict[str, Any] = {"type": "battle_done", "votable": votable}
        if votable:
            frame["vote_after_ms"] = round(self.arena.min_vote_seconds * 1000)
        else:
            frame["message"] = "A model failed to answer, so this battle cannot be voted on."
        await self.send_json(frame)


def _paced_release(emit: EventSink, pace: float) -> PacedRelease | None:
    return PacedRelease(emit, chars_per_second=pace) if pace > 0 else None


def _battle_and_settings(session: Any, battle_id: str) -> tuple[Battle | None, ArenaSettings]:
    # Reading the session may hit the database, so it happens here, off the event loop.
    voter_key = voter_key_or_none(session) if session is not None else None
    battle = battle_for_voter(battle_id=battle_id, voter_key=voter_key) if voter_key else None
    return battle, arena_settings_current()


def _stored_turns(battle: Battle) -> list[tuple[int, list[tuple[str, SideResult]]]]:
    """Every turn's stored answers, for a replay. A battle interrupted mid-answer failed
    without storing that turn's answers: say so rather than show two empty "Done." sides."""
    interrupted = battle.state == Battle.State.FAILED
    replay = []
    for turn in battle_turns(battle, list(battle.answers.order_by("side"))):
        results = []
        for side in ("a", "b"):
            answer = turn.answers.get(side)
            unfinished = answer is None or not answer.finish_reason
            results.append(
                (
                    side,
                    SideResult(
                        text=answer.text if answer is not None else "",
                        finish_reason=answer.finish_reason if answer is not None else "",
                        error=(answer.error if answer is not None else "")
                        or ("the answer was interrupted" if interrupted and unfinished else ""),
                        first_token_s=None,
                        total_s=0.0,
                    ),
                )
            )
        replay.append((turn.number, results))
    return replay


class LeaderboardConsumer(AsyncJsonWebsocketConsumer):
    """A live leaderboard screen: gets the current table on connect, then every refit."""

    async def connect(self) -> None:
        await self.channel_layer.group_add(LIVE_GROUP, self.channel_name)
        await self.accept()
        screen_opened()
        table = await table_for_new_screen(_live_table_from_database)
        await self.send_json({"type": "leaderboard", "table": table})

    async def disconnect(self, code: int) -> None:
        screen_closed()
        await self.channel_layer.group_discard(LIVE_GROUP, self.channel_name)

    async def leaderboard_update(self, event: dict[str, Any]) -> None:
        table_shown(event["table"])
        await self.send_json({"type": "leaderboard", "table": event["table"]})


@database_sync_to_async
def _live_table_from_database() -> dict[str, Any]:
    return live_payload(snapshot_latest(source=RatingSnapshot.Source.LIVE))
