"""Run a battle: stream both contestants' answers at the same time and record them.

The caller (the WebSocket consumer) passes a callback that forwards each event to the voter;
events name a side ("a"/"b"), never a contestant.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from channels.db import database_sync_to_async

from arena.battles.models import Answer, Battle
from arena.battles.selectors import conversation_histories
from arena.battles.services import (
    SideResult,
    battle_claim_generation,
    battle_mark_interrupted,
    battle_record_answers,
)
from arena.competition.selectors import ArenaSettings, arena_settings_current
from arena.serving.client import StreamEnd, TextDelta, stream_chat
from arena.serving.selectors import contestant_endpoint


@dataclass(frozen=True)
class SideDelta:
    side: str
    text: str


@dataclass(frozen=True)
class SideFinished:
    side: str
    result: SideResult


GenerationEvent = SideDelta | SideFinished
EventSink = Callable[[GenerationEvent], Awaitable[None]]


Messages = list[dict[str, str]]


@database_sync_to_async
def _claim_and_load(battle_id: str) -> tuple[list[tuple[Answer, Messages]], ArenaSettings] | None:
    if not battle_claim_generation(battle_id=battle_id):
        return None
    battle = Battle.objects.get(pk=battle_id)
    answers = list(battle.answers.select_related("contestant"))
    histories = conversation_histories(battle, answers)
    return [(answer, histories[answer.side]) for answer in answers], arena_settings_current()


async def battle_run(battle_id: str, emit: EventSink) -> Battle | None:
    """Generate and record both sides' answers to the battle's latest prompt (its first or a
    follow-up); None if another run already claimed it. Each side is sent its own
    conversation: every earlier prompt with its own earlier answers, then the new prompt.

    If the caller is cancelled (the voter closed the page) or anything raises (the answers
    could not be stored, ...), the battle is marked failed so it can never be voted on with
    half-written answers, and the exception propagates.
    """
    claimed = await _claim_and_load(battle_id)
    if claimed is None:
        return None
    sides_to_run, arena = claimed

    async def run_side(answer: Answer, messages: Messages) -> tuple[str, SideResult]:
        pieces: list[str] = []
        end = StreamEnd("error", "no answer")
        # max_tokens bounds tokens, not characters, and a contestant's tokenizer is its own:
        # an answer is cut at `answer_max_chars` as one that reached the length limit.
        room = arena.answer_max_chars
        stream = stream_chat(
            contestant_endpoint(answer.contestant),
            messages,
            max_tokens=arena.max_tokens,
            temperature=arena.temperature,
            timeout_s=arena.generation_timeout_s,
        )
        async with contextlib.aclosing(stream):  # type: ignore[type-var]  # a cut answer closes its connection now
            async for event in stream:
                if isinstance(event, TextDelta):
                    text = event.text[:room]
                    room -= len(text)
                    pieces.append(text)
                    await emit(SideDelta(answer.side, text))
                    if room == 0:
                        end = StreamEnd("length")
                        break
                else:
                    end = event
        result = SideResult(
            text="".join(pieces),
            finish_reason=end.finish_reason,
            error=end.error,
            first_token_s=end.first_token_s,
            total_s=end.total_s,
        )
        await emit(SideFinished(answer.side, result))
        return answer.side, result

    try:
        # A task group, not gather: when one side raises, the other stops streaming too.
        async with asyncio.TaskGroup() as group:
            sides = [
                group.create_task(run_side(answer, messages)) for answer, messages in sides_to_run
            ]
        results = dict(side.result() for side in sides)
        return await database_sync_to_async(battle_record_answers)(
            battle_id=battle_id, results=results
        )
    except BaseException:
        await asyncio.shield(database_sync_to_async(battle_mark_interrupted)(battle_id=battle_id))
        raise
