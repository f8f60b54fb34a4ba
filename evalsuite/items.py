"""What the runner and the audits see of a benchmark item, whatever its data set's schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHOICE_LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class SampleItem:
    """One item as the runner uses it."""

    id: str
    input: str
    target: str
    choices: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The text a model sees (choices lettered), and what a contamination scan looks for."""
        if not self.choices:
            return self.input
        lines = [self.input, ""]
        lines += [f"{CHOICE_LETTERS[i]}) {choice}" for i, choice in enumerate(self.choices)]
        return "\n".join(lines)

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
