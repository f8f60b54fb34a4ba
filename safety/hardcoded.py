"""Hard-coded outputs: evaluation prompts and answers written into code, a chat template or a
generation config, where a model (or the code serving it) could recognise a test item and
return its reference answer instead of earning it.

Code is short and holds fragments (`if "capital of Estria" in prompt:`), so this index uses
5-grams (`N`), and prompts or answers of 3..4 tokens (`MIN_TOKENS`) as one whole gram; the
whole file is one text. For an item, with `pc` and `ac` the shares of its prompt's and its
answer's grams found in the text (threshold `THRESHOLD`, 0.5):

- `pc` and `ac` both above it: *the answer to an evaluation prompt* — high;
- `ac` above it alone, for an answer of at least `N` tokens (shorter answers alone are too
  common to mean anything): *an evaluation answer* — high;
- `pc` above it alone: *an evaluation prompt* — medium (it may be an internal test, but the
  evaluation items are not the agent's to use).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from safety.ngrams import ANSWER, PROMPT, ItemIndex, span_text, tokens

N = 5
MIN_TOKENS = 3
THRESHOLD = 0.5


@dataclass(frozen=True)
class Hardcoded:
    source: str  # a file, or "<checkpoint>/tokenizer_config.json:chat_template"
    line: int
    text: str
    benchmark: str
    item_id: str
    held_out: bool
    prompt_coverage: float
    answer_coverage: float
    what: str  # "answer to an evaluation prompt", "evaluation answer", "evaluation prompt"

    @property
    def severity(self) -> str:
        return "medium" if self.what == "evaluation prompt" else "high"

    def evidence(self) -> dict[str, object]:
        return {
            "source": self.source,
            "line": self.line,
            "text": self.text,
            "what": self.what,
            "benchmark": self.benchmark,
            "item_id": self.item_id,
            "held_out": self.held_out,
            "prompt_coverage": round(self.prompt_coverage, 3),
            "answer_coverage": round(self.answer_coverage, 3),
        }


def hardcoded_index(items: Iterable[object]) -> ItemIndex:
    return ItemIndex(items, n=N, min_tokens=MIN_TOKENS)  # type: ignore[arg-type]


def find_hardcoded(index: ItemIndex, *, source: str, text: str) -> Iterator[Hardcoded]:
    if not text.strip():
        return
    (hits,) = index.search([text])
    for hit in hits.values():
        item = index.items[hit.item]
        pc = index.field_coverage(hit, PROMPT)
        ac = index.field_coverage(hit, ANSWER)
        if pc > THRESHOLD and ac > THRESHOLD:
            what = "answer to an evaluation prompt"
        elif ac > THRESHOLD and len(tokens(item.answer)) >= N:
            what = "evaluation answer"
        elif pc > THRESHOLD:
            what = "evaluation prompt"
        else:
            continue
        start, _, excerpt = span_text(text, hit)
        yield Hardcoded(
            source=source,
            line=text.count("\n", 0, start) + 1,
            text=excerpt,
            benchmark=item.benchmark,
            item_id=item.item_id,
            held_out=item.held_out,
            prompt_coverage=pc,
            answer_coverage=ac,
            what=what,
        )
