"""A model card's YAML front matter, read with bounds: the agent writes it, and the web worker
that also serves voters parses it.

YAML's anchors and aliases make a document a graph: nine levels of nine aliases in 700 bytes
name 9^9 leaves, which `json.dumps` (the `card_fields` column, the API's reply, the organizer's
page) writes out whole, for hours and gigabytes, holding the GIL. So the reader refuses
anchors and aliases outright (no card needs them), bounds the front matter's size, depth and
node count while it is composed, and keeps only the fields the platform knows, each typed and
length-capped. An unknown field is dropped. Text PostgreSQL cannot store (a NUL character, a
lone surrogate: JSON's `\u0000` and `\ud800`, YAML's `"\0"` and `"\ud800"`) is refused in the
card and in each field, with a reason, before any row is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import yaml

MAX_FRONT_MATTER_BYTES = 16 * 1024
MAX_DEPTH = 4  # the card itself, a field, a list or mapping, its items
MAX_NODES = 2_000
MAX_TEXT_CHARS = 1_000
MAX_ITEMS = 100
MAX_COUNT = 10**15  # steps, checkpoint and job ids: far past any real run, far short of a bignum
MAX_HOURS = 10**9


class CardRefused(ValueError):
    """The front matter is malformed, too large, or holds what the reader does not accept."""


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # str: a surrogate here is always lone
UNSTORABLE = "holds a NUL character or a lone surrogate, which the platform cannot store"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with no anchors or aliases, at most MAX_DEPTH levels and MAX_NODES
    nodes: each checked as the node is composed, before anything below it is read."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise CardRefused(
                "the model card's front matter may not use YAML anchors or aliases (&name, *name)"
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise CardRefused(f"the model card's front matter holds more than {MAX_NODES} values")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise CardRefused(f"the model card's front matter nests deeper than {MAX_DEPTH}")
            return super().compose_node(parent, index)  # type: ignore[no-any-return]  # untyped
        finally:
            self._depth -= 1


# --- the fields -------------------------------------------------------------------------------


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError
    if len(value) > MAX_TEXT_CHARS:
        raise CardRefused(f"is longer than {MAX_TEXT_CHARS} characters")
    if _UNSTORABLE.search(value):
        raise CardRefused(UNSTORABLE)
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError
    if not 0 <= value <= MAX_COUNT:
        raise CardRefused(f"must be between 0 and {MAX_COUNT}")
    return value


def _hours(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError
    if not (math.isfinite(value) and 0 <= value <= MAX_HOURS):
        raise CardRefused(f"must be a number between 0 and {MAX_HOURS}")
    return value


def _optional_count(value: object) -> int | None:
    return None if value is None else _count(value)


def _optional_rate(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError
    return value


def _list_of(item: Callable[[object], Any]) -> Callable[[object], list[Any]]:
    def read(value: object) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError
        if len(value) > MAX_ITEMS:
            raise CardRefused(f"holds more than {MAX_ITEMS} items")
        return [item(v) for v in value]

    return read


def _job(value: object) -> int | str:
    return _count(value) if isinstance(value, int) and not isinstance(value, bool) else _text(value)


def _end_of_turn_rate(value: object) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise TypeError
    return {
        name: _optional_rate(value[name])
        for name in ("before", "after", "held_out_prompts")
        if name in value
    }


# Read by the audit (safety/cards.py), the release's card, the reports: required.
REQUIRED_FIELDS: dict[str, Callable[[object], Any]] = {
    "training_method": _text,
    "steps": _count,
    "gpu_hours": _hours,
    "hardware": _text,
    "datasets": _list_of(_text),
}
# Shown to organizers when present (the reference agent writes them).
OPTIONAL_FIELDS: dict[str, Callable[[object], Any]] = {
    "base_model": _text,
    "parent_checkpoint": _optional_count,
    "renominated_checkpoint": _optional_count,
    "jobs": _list_of(_job),
    "end_of_turn_rate": _end_of_turn_rate,
    # The model's size, in all and per token (a mixture of experts), which the audit compares
    # with the checkpoint's config and the base model's (safety/audits/model_card.py).
    "parameters": _optional_count,
    "active_parameters": _optional_count,
}


def front_matter_fields(card: str) -> dict[str, object]:
    """The known fields of the card's front matter (between its first two '---' lines), typed
    and bounded; raises CardRefused, its message fit to show the agent."""
    if _UNSTORABLE.search(card):
        raise CardRefused(f"the model card {UNSTORABLE}")
    if not card.startswith("---\n") or "\n---" not in card[4:]:
        raise CardRefused("the model card must start with YAML front matter between '---' lines")
    front = card[4:].split("\n---", 1)[0]
    if len(front.encode()) > MAX_FRONT_MATTER_BYTES:
        raise CardRefused(
            f"the model card's front matter is longer than {MAX_FRONT_MATTER_BYTES} bytes"
        )
    loader = _BoundedLoader(front)
    try:
        fields = loader.get_single_data()
    except CardRefused:
        raise
    except yaml.YAMLError as exc:
        raise CardRefused(f"the model card's front matter is not valid YAML: {exc}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # int("9" * 5000), say
        raise CardRefused(
            f"the model card's front matter holds a value YAML cannot read: {exc}"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(fields, dict):
        raise CardRefused("the model card's front matter must be a mapping of fields")
    kept: dict[str, object] = {}
    for name, read in {**REQUIRED_FIELDS, **OPTIONAL_FIELDS}.items():
        if name not in fields:
            if name in REQUIRED_FIELDS:
                raise CardRefused(f"the model card lacks '{name}'")
            continue
        try:
            kept[name] = read(fields[name])
        except TypeError:
            raise CardRefused(f"the model card's '{name}' has the wrong type") from None
        except CardRefused as bound:
            raise CardRefused(f"the model card's '{name}' {bound}") from None
    return kept
