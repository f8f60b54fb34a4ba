"""Contamination: evaluation items inside training data.

The index holds every evaluation item, held-out ones included, as 8-grams (`N`) of normalised
tokens (see `safety.ngrams`); a prompt or answer of 4..7 tokens (`MIN_TOKENS`) counts as one
whole gram, shorter ones are not indexed. A record of a data file *contains* an item when more
than half (`THRESHOLD`) of the item's distinct grams occur in that record — the usual test
(GPT-3, Llama 2 reports) made per training example, so common phrases scattered through a large
file do not add up to a match — or more than half of its prompt's grams (training on test
inputs, e.g. distilling a stronger model's answers to them), or more than half of its answer's
grams for an answer of at least `N` tokens (a copied reference answer). Each match is
evidence: file, line, character offsets in the record, the matched text, the item and its
coverages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from safety.budget import Budget, BudgetSpent
from safety.files import MAX_DATA_FILE_BYTES, records
from safety.formats import DecompressionBomb, Unreadable
from safety.ngrams import ANSWER, PROMPT, ItemIndex, span_text

N = 8
MIN_TOKENS = 4
THRESHOLD = 0.5
BATCH_RECORDS = 2048


@dataclass(frozen=True)
class Match:
    path: str
    line: int
    start: int  # character offsets within the record
    end: int
    text: str
    benchmark: str
    item_id: str
    held_out: bool
    coverage: float
    prompt_coverage: float
    answer_coverage: float

    def evidence(self) -> dict[str, object]:
        return {
            "file": self.path,
            "line": self.line,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "benchmark": self.benchmark,
            "item_id": self.item_id,
            "held_out": self.held_out,
            "coverage": round(self.coverage, 3),
            "prompt_coverage": round(self.prompt_coverage, 3),
            "answer_coverage": round(self.answer_coverage, 3),
        }


@dataclass
class FileScan:
    path: str
    records: int
    matches: list[Match]
    skipped: str = ""  # why the file was not read, if it was not
    budget_spent: bool = False  # stopped by the agent's audit budget: nothing more to read


def contamination_index(items: Iterable[object]) -> ItemIndex:
    return ItemIndex(items, n=N, min_tokens=MIN_TOKENS)  # type: ignore[arg-type]


def scan_file(index: ItemIndex, path: Path, budget: Budget | None = None) -> FileScan:
    """The file's matches. What it reads is charged to `budget`: once that is spent the scan
    stops (`budget_spent`), keeping the matches found so far."""
    try:
        if budget is not None:
            budget.check()
        size = path.stat().st_size
    except OSError as exc:
        return FileScan(str(path), 0, [], skipped=f"unreadable ({exc.strerror})")
    except BudgetSpent as exc:
        return FileScan(str(path), 0, [], skipped=f"left unread: {exc}", budget_spent=True)
    if size > MAX_DATA_FILE_BYTES:
        return FileScan(str(path), 0, [], skipped=f"larger than {MAX_DATA_FILE_BYTES} bytes")
    scan = FileScan(str(path), 0, [])
    try:
        for batch in _batches(records(path, budget)):
            scan.records += len(batch)
            texts = [record.text for record in batch]
            for record, hits in zip(batch, index.search(texts), strict=True):
                for hit in hits.values():
                    item = index.items[hit.item]
                    coverage = index.coverage(hit)
                    prompt = index.field_coverage(hit, PROMPT)
                    answer = index.field_coverage(hit, ANSWER) if item.answer_tokens >= N else 0.0
                    if max(coverage, prompt, answer) <= THRESHOLD:
                        continue
                    start, end, text = span_text(record.text, hit)
                    scan.matches.append(
                        Match(
                            path=str(path),
                            line=record.line,
                            start=start,
                            end=end,
                            text=text,
                            benchmark=item.benchmark,
                            item_id=item.item_id,
                            held_out=item.held_out,
                            coverage=coverage,
                            prompt_coverage=prompt,
                            answer_coverage=answer,
                        )
                    )
    except BudgetSpent as exc:
        scan.skipped = f"read in part, the rest left unread: {exc}"
        scan.budget_spent = True
    except DecompressionBomb as exc:
        scan.skipped = str(exc)
    except Unreadable as exc:  # a crafted or broken Parquet or Arrow file, a bad stream
        scan.skipped = f"unreadable: {exc}"
    except (OSError, EOFError, ValueError) as exc:  # a truncated .gz, a link swapped in
        scan.skipped = f"could not be read to the end ({type(exc).__name__}: {exc})"
    return scan


def _batches(source: Iterator) -> Iterator[list]:
    batch: list = []
    try:
        for record in source:
            batch.append(record)
            if len(batch) >= BATCH_RECORDS:
                yield batch
                batch = []
    except BudgetSpent:
        if batch:  # what was read before the budget ran out is still scanned
            yield batch
        raise
    if batch:
        yield batch
