"""The battle export (DESIGN.md §5): one JSON object per line, compatible with the public
Chatbot Arena "clean battle" format, so analysis code written for it reads ours and ours
reads theirs.

`battle_export_rows` (needs Django) writes it; `read_battle_export` (pure) reads and checks
any file in the format, naming the line of the first problem it finds.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena.battles.categories import CATEGORIES, categories_decode
from arena.battles.style import (
    STYLE_VERSION,
    StyleFeatures,
    count_tokens,
    style_features,
    style_sum,
)

if TYPE_CHECKING:  # the reader needs no Django
    from arena.battles.models import Answer
    from arena.battles.selectors import TurnRecord

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
CHOICE_TO_WINNER = {"a": "model_a", "b": "model_b", "tie": "tie", "bothbad": "tie (bothbad)"}
HEADER_KEYS = tuple(f"h{level}" for level in range(1, 7))
LIST_KEYS = ("ordered", "unordered")
BOLD_KEYS = ("**", "__")


class ExportFormatError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class SideStyle:
    tokens: int
    headers: dict[str, int]
    lists: dict[str, int]
    bold: dict[str, int]


@dataclass(frozen=True)
class BattleRecord:
    battle_id: str
    model_a: str
    model_b: str
    winner: str
    tstamp: float
    judge: str
    phase: str
    style_a: SideStyle | None  # None when the line carries no style metadata
    style_b: SideStyle | None
    raw: dict[str, Any]


def battle_export_rows(
    *, phase: str | None = None, contestant_ids: Collection[int] | None = None
) -> Iterator[dict[str, Any]]:
    """The votes in the fit (counted, no excluded voter), oldest first; voters appear as salted
    hashes. Optionally only one phase's battles, and only battles in which one of
    `contestant_ids` answered."""
    from arena.battles.selectors import battle_turns, votes_in_fit

    votes = votes_in_fit(phase=phase)
    if contestant_ids is not None:
        votes = votes.filter(battle__answers__contestant_id__in=list(contestant_ids)).distinct()
    votes = (
        votes.select_related("battle")
        .prefetch_related("battle__answers__contestant", "battle__follow_ups__answers")
        .order_by("created_at", "battle_id")
    )
    for vote in votes.iterator(chunk_size=2000):
        battle = vote.battle
        answers = list(battle.answers.all())
        sides = {answer.side: answer for answer in answers}
        a, b = sides["a"], sides["b"]
        turns = battle_turns(battle, answers)
        style_a, style_b = _answer_style(a, turns), _answer_style(b, turns)
        yield {
            "battle_id": battle.pk,
            "model_a": a.contestant.display_name,
            "model_b": b.contestant.display_name,
            "winner": CHOICE_TO_WINNER[battle.forced_winner or vote.choice],
            "tstamp": vote.created_at.timestamp(),
            "judge": vote.voter_key,
            "phase": battle.phase,
            "targeted_round": battle.targeted_round_id,
            # The voter's prompts (Chatbot Arena's `turn`): 1, or more with follow-ups.
            "turn": battle.turns,
            # langdetect's code of the prompt ("" when unsure), and its category tags in
            # Chatbot Arena's field, one boolean per category (arena/battles/categories.py),
            # with Arena-Hard's criteria when a judge read the prompt.
            "language": battle.language,
            "category_tag": _category_tag(battle),
            # The near-duplicate group of the prompt (its normalised key when not grouped
            # yet): `ratings --votes` down-weights a group's battles by it.
            "prompt_group": battle.prompt_group
            if battle.prompt_group is not None
            else battle.prompt_key,
            "conv_metadata": {
                # Sums over the whole conversation, every turn, as Chatbot Arena's are.
                "sum_user_tokens": sum(count_tokens(turn.prompt) for turn in turns),
                "sum_assistant_a_tokens": style_a.tokens,
                "sum_assistant_b_tokens": style_b.tokens,
                "header_count_a": style_a.headers,
                "header_count_b": style_b.headers,
                "list_count_a": style_a.lists,
                "list_count_b": style_b.lists,
                "bold_count_a": style_a.bold,
                "bold_count_b": style_b.bold,
                # The counting rules of both sides' counts (arena/battles/style.py). A reader
                # may ignore it: a line without it (older exports, other arenas) still reads.
                "style_version": STYLE_VERSION,
                # The side whose answer revealed an identity ("" none): it lost the battle
                # whatever the voter chose, and `winner` says so; `vote` is the voter's choice.
                "leaked_side": battle.leaked_sides,
                "vote": vote.choice,
            },
            "conversation_a": _conversation(turns, "a"),
            "conversation_b": _conversation(turns, "b"),
            "finish_reason_a": a.finish_reason,
            "finish_reason_b": b.finish_reason,
        }


def _category_tag(battle: Any) -> dict[str, Any]:
    tags = set(categories_decode(battle.categories))
    tag: dict[str, Any] = {name: name in tags for name in CATEGORIES}
    # Arena-Hard's criteria as a judge read them; null until one has (every line has the
    # same keys, so the release's Parquet rows are the export's).
    tag["hard_criteria"] = battle.category_criteria or None
    tag["categorized_by"] = battle.categorized_by
    return tag


def _answer_style(answer: Answer, turns: list[TurnRecord]) -> StyleFeatures:
    """The side's stored counts (summed over its answers in every turn), or, for a row stored
    under other rules (written by code older than `STYLE_VERSION`, e.g. a worker still running
    during an upgrade), its counts under the current rules: every line follows the one version
    it names."""
    if answer.style_version == STYLE_VERSION:
        return StyleFeatures(
            tokens=answer.tokens,
            headers=answer.header_counts,
            lists=answer.list_counts,
            bold=answer.bold_counts,
        )
    return style_sum(
        style_features(turn.answers[answer.side].text)
        for turn in turns
        if answer.side in turn.answers
    )


def write_battle_export(rows: Iterable[dict[str, Any]], path: Path) -> int:
    count = 0
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
    tmp.replace(path)  # a reader never sees half a file
    return count


def read_battle_export(path: Path, *, require_style: bool = False) -> list[BattleRecord]:
    records: list[BattleRecord] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                records.append(parse_battle_line(line, number, require_style=require_style))
    return records


def parse_battle_line(line: str, number: int, *, require_style: bool = False) -> BattleRecord:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ExportFormatError(number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ExportFormatError(number, "expected a JSON object")
    for key in ("model_a", "model_b", "winner"):
        if not isinstance(row.get(key), str) or not row[key]:
            raise ExportFormatError(number, f"missing or empty {key!r}")
    if row["winner"] not in WINNERS:
        raise ExportFormatError(
            number, f"unknown winner {row['winner']!r} (expected one of {', '.join(WINNERS)})"
        )
    if row["model_a"] == row["model_b"]:
        raise ExportFormatError(number, f"a battle of {row['model_a']!r} against itself")
    metadata = row.get("conv_metadata")
    style_a = style_b = None
    if isinstance(metadata, dict) and "sum_assistant_a_tokens" in metadata:
        style_a = _side_style(metadata, "a", number)
        style_b = _side_style(metadata, "b", number)
    elif require_style:
        raise ExportFormatError(number, "no style metadata (conv_metadata) for style control")
    tstamp = row.get("tstamp", 0.0)
    if isinstance(tstamp, bool) or not isinstance(tstamp, int | float):
        raise ExportFormatError(number, f"tstamp {tstamp!r} is not a number")
    return BattleRecord(
        battle_id=str(row.get("battle_id", row.get("question_id", number))),
        model_a=row["model_a"],
        model_b=row["model_b"],
        winner=row["winner"],
        tstamp=float(tstamp),
        judge=str(row.get("judge", "")),
        phase=str(row.get("phase", "")),
        style_a=style_a,
        style_b=style_b,
        raw=row,
    )


def _side_style(metadata: dict[str, Any], side: str, number: int) -> SideStyle:
    tokens = _count(metadata.get(f"sum_assistant_{side}_tokens"))
    if tokens is None:
        raise ExportFormatError(
            number, f"sum_assistant_{side}_tokens must be a non-negative integer"
        )
    return SideStyle(
        tokens=tokens,
        headers=_counts(metadata, f"header_count_{side}", HEADER_KEYS, number),
        lists=_counts(metadata, f"list_count_{side}", LIST_KEYS, number),
        bold=_counts(metadata, f"bold_count_{side}", BOLD_KEYS, number),
    )


def _counts(
    metadata: dict[str, Any], field: str, keys: tuple[str, ...], number: int
) -> dict[str, int]:
    value = metadata.get(field)
    if not isinstance(value, dict):
        raise ExportFormatError(number, f"missing {field!r} in conv_metadata")
    counts: dict[str, int] = {}
    for key in keys:
        count = _count(value.get(key, 0))
        if count is None:
            raise ExportFormatError(number, f"{field}[{key!r}] must be a non-negative integer")
        counts[key] = count
    return counts


def _conversation(turns: list[TurnRecord], side: str) -> list[dict[str, str]]:
    """One side's whole conversation as OpenAI messages, user and assistant alternating."""
    messages = []
    for turn in turns:
        messages.append({"role": "user", "content": turn.prompt})
        messages.append({"role": "assistant", "content": turn.answers[side].text})
    return messages


def _count(value: Any) -> int | None:
    """A non-negative whole number as JSON writes it (5, or 5.0 from a float column), else None.
    JSON's true/false are not counts, though Python's bool is an int."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None
