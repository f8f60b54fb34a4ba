"""What the runner, the aggregates and the audits see of a benchmark item, whatever its data
set's schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# A to Z: BBH's reasoning_about_colored_objects offers 18 options (A to R)
CHOICE_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class SampleItem:
    """One item as the runner uses it."""

    id: str
    input: str
    target: str
    choices: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    # Text the model reads before the item (BBH: its subset's few-shot prompt), shared by many
    # items: part of what the model sees, not of the item, so contamination scans skip it.
    preamble: str = ""

    @property
    def prompt(self) -> str:
        """The text a model sees (choices lettered), and what a contamination scan looks for."""
        if not self.choices:
            return self.input
        lines = [self.input, ""]
        lines += [f"{CHOICE_LETTERS[i]}) {choice}" for i, choice in enumerate(self.choices)]
        return "\n".join(lines)

    @property
    def model_input(self) -> str:
        """What the model is sent: the preamble, then the prompt."""
        return self.preamble + self.prompt

    @property
    def answer(self) -> str:
        """The reference answer as text (for a choice item, the correct choice itself)."""
        if self.choices:
            return self.choices[CHOICE_LETTERS.index(self.target)]
        return self.target


@dataclass(frozen=True)
class EvalItem:
    benchmark: str
    item_id: str
    prompt: str
    answer: str
    held_out: bool


@dataclass(frozen=True)
class AnsweredItem:
    """One scored item as the aggregates need it: the item's metadata, the model's text and
    what its scorer noted (a rubric judge's parsed answers)."""

    metadata: Mapping[str, Any]
    completion: str
    score_metadata: Mapping[str, Any] = field(default_factory=dict)
