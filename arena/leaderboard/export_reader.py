"""A battle export read straight into columns: a million battles in seconds and tens of MB.

`read_battle_export` (arena/battles/export.py) keeps every line as a `BattleRecord` with its
parsed dict: at a million lines that is a minute and about 6 GB. This reader keeps only what
the fit needs, as numpy columns — a code per model name, a winner code, the eight style
counts — and lets each parsed line go at once.

The file is untrusted (anyone can hand one to `ratings --votes`), so every line is read with
a bound on its length, and a line is accepted only as `parse_battle_line` would accept it: a
fast check covers the lines our export and Chatbot Arena's write; anything it is not sure
of goes to `parse_battle_line` itself, which either raises the same error naming the line or
returns the same values. Pure Python, numpy and msgspec: no Django.

The fast check is msgspec decoding each line into a typed struct of only the fields the fit
reads (`_StyledLine`, `_PlainLine`): about a tenth of the standard parser's time, because the
rest of the line (conversations, judge, ...) is checked as JSON but never built into Python
objects. msgspec is strict (RFC 8259: no NaN, no lone surrogates, no trailing commas; a count
must be a JSON integer, never `true` or `5.0`), so what it accepts the standard parser accepts
with the same values; whatever it refuses, for any reason, takes the old road (the standard
parser, then `parse_battle_line`), so the values and the error messages stay the reference's.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from array import array
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import msgspec
import numpy as np
from numpy.typing import NDArray

from arena.battles.export import (
    BOLD_KEYS,
    HEADER_KEYS,
    LIST_KEYS,
    WINNERS,
    ExportFormatError,
    SideStyle,
    parse_battle_line,
)
from arena.battles.prompt_groups import KEY_BITS, prompt_key
from arena.rating.data import OUTCOME, Battles

# One battle is well under a kilobyte, or tens of kilobytes with both conversations; a line
# longer than this is refused rather than parsed (JSON parsing holds the whole line).
MAX_LINE_BYTES = 8 * 1024 * 1024
_WINNER_CODE = {winner: code for code, winner in enumerate(WINNERS)}
_OUTCOME_OF_CODE = np.array([OUTCOME[winner] for winner in WINNERS])
# Per side, the metadata keys of its style columns, in the order `Battles` wants them
# (spelled out once, not formatted again on every line).
_SIDE_KEYS = tuple(
    (
        f"sum_assistant_{side}_tokens",
        (
            (f"header_count_{side}", HEADER_KEYS),
            (f"list_count_{side}", LIST_KEYS),
            (f"bold_count_{side}", BOLD_KEYS),
        ),
    )
    for side in ("a", "b")
)


_Count = Annotated[int, msgspec.Meta(ge=0)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Winner = Literal[WINNERS]  # type: ignore[valid-type]  # the tuple spells the choices


class _Headers(msgspec.Struct, gc=False):
    h1: _Count = 0
    h2: _Count = 0
    h3: _Count = 0
    h4: _Count = 0
    h5: _Count = 0
    h6: _Count = 0


class _Lists(msgspec.Struct, gc=False):
    ordered: _Count = 0
    unordered: _Count = 0


class _Bold(msgspec.Struct, gc=False):
    stars: _Count = msgspec.field(name="**", default=0)
    underscores: _Count = msgspec.field(name="__", default=0)


class _Metadata(msgspec.Struct, gc=False):
    """The style fields of `conv_metadata`, all required, as `parse_battle_line` wants them
    once `sum_assistant_a_tokens` is there; any other key is skipped (but checked as JSON)."""

    sum_assistant_a_tokens: _Count
    sum_assistant_b_tokens: _Count
    header_count_a: _Headers
    header_count_b: _Headers
    list_count_a: _Lists
    list_count_b: _Lists
    bold_count_a: _Bold
    bold_count_b: _Bold


class _StyledLine(msgspec.Struct, gc=False):
    model_a: _Name
    model_b: _Name
    winner: _Winner
    conv_metadata: _Metadata
    tstamp: int | float = 0.0
    # Our export always has it (null: a battle stored before prompt keys); a line without
    # it is grouped by its first user message, which only the road below reads.
    prompt_group: int | None | msgspec.UnsetType = msgspec.UNSET


class _PlainLine(msgspec.Struct, gc=False):
    """A line for a raw fit: style metadata is optional, but checked when it is there."""

    model_a: _Name
    model_b: _Name
    winner: _Winner
    conv_metadata: _Metadata | None = None
    tstamp: int | float = 0.0
    prompt_group: int | None | msgspec.UnsetType = msgspec.UNSET


# The structs spell out the export's keys (DESIGN.md §5); they must stay the export's.
assert _Headers.__struct_fields__ == HEADER_KEYS
assert _Lists.__struct_fields__ == LIST_KEYS
assert _Bold.__struct_encode_fields__ == BOLD_KEYS


@dataclass(frozen=True)
class BattleColumns:
    names: list[str]  # code -> model name, in order of first appearance
    a: NDArray[np.int32]  # (n,) code of the model on side A
    b: NDArray[np.int32]  # (n,)
    winner: NDArray[np.int8]  # (n,) index into WINNERS
    style_a: NDArray[np.float64] | None  # (n, 4) tokens, headers, list items, bold spans
    style_b: NDArray[np.float64] | None
    # (n,) each battle's prompt group: the line's `prompt_group`, else the key of its first
    # user message (normalised), else a group of its own (a negative number).
    groups: NDArray[np.int64]

    def battles(self) -> Battles:
        return Battles.from_codes(
            self.names,
            self.a,
            self.b,
            _OUTCOME_OF_CODE[self.winner],
            style_a=self.style_a,
            style_b=self.style_b,
        )


def battle_columns_from_file(
    path: Path,
    *,
    style: bool,
    max_line_bytes: int = MAX_LINE_BYTES,
    workers: int | None = None,
    category: str | None = None,
) -> BattleColumns:
    """Raises ExportFormatError naming the line of the first bad record (too long, not UTF-8,
    or refused by `parse_battle_line`). With `style`, every line must carry style metadata.
    With `category`, only the lines tagged with it (`line_in_category`) are kept; every line
    is still checked.

    JSON parsing is most of the time, so a big file is cut into `workers` byte ranges (by
    default one per core, up to `MAX_WORKERS`) read by forked processes; the columns are
    joined in file order, so the result does not depend on the number of workers."""
    size = path.stat().st_size
    if workers is None:
        workers = min(MAX_WORKERS, os.cpu_count() or 1) if size >= PARALLEL_FROM_BYTES else 1
    bounds = [size * i // workers for i in range(workers + 1)]
    ranges = list(zip(bounds, bounds[1:], strict=False))
    if workers == 1:
        parts = [_read_range(path, 0, size, style, max_line_bytes, category)]
    else:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = [
                pool.submit(_read_range, path, begin, end, style, max_line_bytes, category)
                for begin, end in ranges
            ]
            parts = [future.result() for future in futures]
    lines_before = 0
    for part in parts:  # the first bad line in the file, numbered in the whole file
        if part.error is not None:
            number, message = part.error
            raise ExportFormatError(lines_before + number, message)
        lines_before += part.lines
    return _joined(parts, style)


MAX_WORKERS = 4
PARALLEL_FROM_BYTES = 64 * 1024 * 1024  # below this, forking costs more than it saves


@dataclass
class _Part:
    """The columns of one byte range, its own model codes, and its lines; or its first
    error, numbered within the range."""

    names: list[str]
    a: array
    b: array
    winner: array
    counts: array
    groups: array
    lines: int
    error: tuple[int, str] | None = None


def _read_range(
    path: Path, begin: int, end: int, style: bool, max_line_bytes: int, category: str | None
) -> _Part:
    """The lines that start in [begin, end)."""
    codes: dict[str, int] = {}
    a, b = array("i"), array("i")
    winner = array("b")
    # 8 a line: A's tokens, headers, lists, bold, then B's; as floats, as the fit takes them
    # (a count too big for a float is refused below, not wrapped around).
    counts = array("d")
    groups = array("q")
    number = 0
    decode = cast(
        "Callable[[bytes], _StyledLine | _PlainLine]",
        msgspec.json.Decoder(_StyledLine if style else _PlainLine).decode,
    )
    winner_codes = _WINNER_CODE

    def part(error: tuple[int, str] | None = None) -> _Part:
        return _Part(list(codes), a, b, winner, counts, groups, number, error)

    with path.open("rb") as lines:
        position = begin
        if begin > 0:  # the line running over `begin` belongs to the range before
            lines.seek(begin - 1)
            position -= 1
            while True:  # skipped a bounded piece at a time
                piece = lines.readline(max_line_bytes + 1)
                position += len(piece)
                if not piece or piece.endswith(b"\n"):
                    break
        while position < end:
            raw = lines.readline(max_line_bytes + 1)
            if not raw:
                break
            position += len(raw)
            number += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                return part((number, f"longer than {max_line_bytes:,} bytes"))
            try:
                line = raw.decode("utf-8")  # msgspec lets bad UTF-8 inside a string through
            except UnicodeDecodeError:
                return part((number, "not UTF-8"))
            try:
                typed = decode(raw)
            except msgspec.MsgspecError:
                typed = None  # unusual or bad: the old road below decides, and says why
            # The typed road reads no tags: a category's fit takes the road below.
            if (
                typed is not None
                and category is None
                and typed.prompt_group is not msgspec.UNSET
                and typed.model_a != typed.model_b
            ):
                group = typed.prompt_group
                groups.append(group if group is not None and 0 <= group < 1 << KEY_BITS else -1)
                a.append(codes.setdefault(typed.model_a, len(codes)))
                b.append(codes.setdefault(typed.model_b, len(codes)))
                winner.append(winner_codes[typed.winner])
                metadata = typed.conv_metadata
                if style:
                    try:
                        counts.extend(_metadata_counts(metadata))  # type: ignore[arg-type]  # style: a _StyledLine, whose metadata is required
                    except OverflowError:
                        return part((number, "a style count is too large"))
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                return part((number, f"not valid JSON ({exc.msg})"))
            fields = _fast_fields(row, style)
            if fields is None:  # unusual: let the reference parser decide, and say why
                try:
                    fields = _reference_fields(line, number, style)
                except ExportFormatError as exc:
                    return part((number, str(exc).removeprefix(f"line {number}: ")))
            model_a, model_b, winner_code, side_counts = fields
            if category is not None and not line_in_category(row, category):
                continue
            groups.append(_group_of(row))
            a.append(codes.setdefault(model_a, len(codes)))
            b.append(codes.setdefault(model_b, len(codes)))
            winner.append(winner_code)
            if style:
                try:
                    counts.extend(side_counts)
                except OverflowError:
                    return part((number, "a style count is too large"))
    return part()


def _joined(parts: list[_Part], style: bool) -> BattleColumns:
    """One set of columns in file order, with one code per model name."""
    codes: dict[str, int] = {}
    a_parts, b_parts = [], []
    for part in parts:
        recode = np.array([codes.setdefault(name, len(codes)) for name in part.names], np.int32)
        a_parts.append(recode[np.frombuffer(part.a, dtype=np.int32)])
        b_parts.append(recode[np.frombuffer(part.b, dtype=np.int32)])
    winner = np.concatenate([np.frombuffer(part.winner, dtype=np.int8) for part in parts])
    groups = np.concatenate([np.frombuffer(part.groups, dtype=np.int64) for part in parts])
    ungrouped = groups < 0
    groups[ungrouped] = -1 - np.flatnonzero(ungrouped)  # each a group of its own
    style_a = style_b = None
    if style:
        both = np.concatenate(
            [np.frombuffer(part.counts, dtype=np.float64).reshape(-1, 8) for part in parts]
        )
        style_a, style_b = both[:, :4], both[:, 4:]
    return BattleColumns(
        names=list(codes),
        a=np.concatenate(a_parts),
        b=np.concatenate(b_parts),
        winner=winner,
        style_a=style_a,
        style_b=style_b,
        groups=groups,
    )


# Chatbot Arena's own tags (its clean battle export's `category_tag`), read when a line has
# none of ours, so `ratings --votes --category` works on its files too.
_ARENA_TAGS = {
    "math": ("math_v0.1", "math"),
    "instruction_following": ("if_v0.1", "if"),
    "creative_writing": ("creative_writing_v0.1", "creative_writing"),
}
_HARD_CRITERIA_MIN = 6


def line_in_category(row: Any, category: str) -> bool:
    """Whether a battle line is tagged `category`: our export's `category_tag` (one boolean
    per category) or, failing that, Chatbot Arena's fields (its `category_tag` entries, its
    criteria for hard prompts, `turn` for multi-turn, `language` for non-English, the user's
    tokens for a long query)."""
    if type(row) is not dict:
        return False
    tag = row.get("category_tag")
    tag = tag if type(tag) is dict else {}
    if type(tag.get(category)) is bool:
        return tag[category]
    if category in _ARENA_TAGS:
        group, key = _ARENA_TAGS[category]
        entry = tag.get(group)
        return type(entry) is dict and entry.get(key) is True
    if category == "hard":
        criteria = tag.get("criteria_v0.1")
        if type(criteria) is not dict:
            return False
        return sum(value is True for value in criteria.values()) >= _HARD_CRITERIA_MIN
    if category == "multi_turn":
        turn = row.get("turn")
        return type(turn) is int and turn > 1
    if category == "non_english":
        language = row.get("language")
        return type(language) is str and language not in ("", "English", "en", "unknown")
    if category == "long_query":
        metadata = row.get("conv_metadata")
        tokens = metadata.get("sum_user_tokens") if type(metadata) is dict else None
        return type(tokens) is int and tokens >= 500
    return False


def _group_of(row: Any) -> int:
    """The line's prompt group; -1: a group of its own. A line of ours always has the field
    (null for a battle stored before prompt keys, which the database fit also leaves
    alone); a line without it (another arena's) is grouped by its first user message."""
    if type(row) is not dict:
        return -1
    if "prompt_group" in row:
        group = row["prompt_group"]
        return group if type(group) is int and 0 <= group < 1 << KEY_BITS else -1
    conversation = row.get("conversation_a")
    if type(conversation) is list and conversation and type(conversation[0]) is dict:
        content = conversation[0].get("content")
        if type(content) is str:
            return prompt_key(content)
    return -1


Fields = tuple[str, str, int, tuple[int, ...]]


def _fast_fields(row: Any, style: bool) -> Fields | None:
    """The fields of a line in the plain form our export writes (whole non-negative counts,
    every style field present); None for anything else, valid or not."""
    if type(row) is not dict:
        return None
    model_a, model_b, winner = row.get("model_a"), row.get("model_b"), row.get("winner")
    if type(model_a) is not str or type(model_b) is not str or not model_a or not model_b:
        return None
    code = _WINNER_CODE.get(winner) if type(winner) is str else None
    if code is None or model_a == model_b:
        return None
    tstamp = row.get("tstamp", 0.0)
    if type(tstamp) is not float and type(tstamp) is not int:
        return None
    metadata = row.get("conv_metadata")
    if type(metadata) is not dict or "sum_assistant_a_tokens" not in metadata:
        # No style metadata: the reference parser accepts it for a raw fit, refuses it for
        # a styled one (and then says so).
        return None if style else (model_a, model_b, code, ())
    side_counts = []
    for tokens_key, count_fields in _SIDE_KEYS:
        tokens = metadata.get(tokens_key)
        if type(tokens) is not int or tokens < 0:
            return None
        side_counts.append(tokens)
        for field, keys in count_fields:
            total = _total(metadata.get(field), keys)
            if total < 0:
                return None
            side_counts.append(total)
    return model_a, model_b, code, tuple(side_counts)


def _metadata_counts(m: _Metadata) -> tuple[int, ...]:
    """The eight style columns of a line msgspec read: each side's tokens, headers, list
    items and bold spans."""
    ha, hb, la, lb, ba, bb = (
        m.header_count_a,
        m.header_count_b,
        m.list_count_a,
        m.list_count_b,
        m.bold_count_a,
        m.bold_count_b,
    )
    return (
        m.sum_assistant_a_tokens,
        ha.h1 + ha.h2 + ha.h3 + ha.h4 + ha.h5 + ha.h6,
        la.ordered + la.unordered,
        ba.stars + ba.underscores,
        m.sum_assistant_b_tokens,
        hb.h1 + hb.h2 + hb.h3 + hb.h4 + hb.h5 + hb.h6,
        lb.ordered + lb.unordered,
        bb.stars + bb.underscores,
    )


def _total(counts: Any, keys: tuple[str, ...]) -> int:
    """The sum of `counts[key]` (absent: 0) over `keys`; -1 unless each is a plain whole
    number ≥ 0 in a dict (the reference parser then decides)."""
    if type(counts) is not dict:
        return -1
    total = 0
    for key in keys:
        value = counts.get(key, 0)
        if type(value) is not int or value < 0:
            return -1
        total += value
    return total


def _reference_fields(line: str, number: int, style: bool) -> Fields:
    record = parse_battle_line(line, number, require_style=style)
    side_counts: tuple[int, ...] = ()
    if style:
        side_counts = (*_side_totals(record.style_a), *_side_totals(record.style_b))
    return record.model_a, record.model_b, _WINNER_CODE[record.winner], side_counts


def _side_totals(side: SideStyle | None) -> tuple[int, int, int, int]:
    assert side is not None  # parsed with require_style=True
    return (
        side.tokens,
        sum(side.headers.values()),
        sum(side.lists.values()),
        sum(side.bold.values()),
    )
