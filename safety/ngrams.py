"""An n-gram index of evaluation items, and the normalisation both sides go through.

Normalisation: Unicode NFKC, case-folded, then split into runs of letters and digits; every
other character (punctuation, whitespace, quotes, JSON or CSV syntax, underscores) is a
separator. So "What is 2+2?" and `{"q": "WHAT  is 2 + 2"}` give the same tokens — casing,
spacing, line breaks and punctuation do not hide a copied item.

An item has two fields, the prompt and the answer, indexed separately (in a training file they
are rarely adjacent: JSON keys or chat markers sit between them). A field of at least `n`
tokens contributes its n-grams; a field of `min_tokens`..`n - 1` tokens contributes itself,
whole, as one shorter gram; a field under `min_tokens` tokens (an answer like "B" or "42")
contributes nothing, because it would match everywhere. An item's *coverage* in a text is the
share of its distinct grams found there. Items with no grams at all are counted, not scanned.

Grams are hashed (a 64-bit polynomial hash of vocabulary ids, computed with numpy over a whole
batch of records), so a gigabyte of text costs one dictionary lookup per token plus a few
vectorised passes. A token that occurs in no evaluation item maps to id 0, and a window that
contains a 0 cannot match anything. No Django here.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Protocol

import numpy as np

_TOKEN = re.compile(r"[^\W_]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_PRIME = np.uint64(0x100000001B3)  # odd multiplier; arithmetic wraps modulo 2**64
_LENGTH_SALT = np.uint64(0x9E3779B97F4A7C15)

PROMPT, ANSWER = 0, 1
FIELD_NAMES = ("prompt", "answer")


class EvalItemLike(Protocol):
    """What the index needs of `evalsuite.registry.EvalItem`."""

    @property
    def benchmark(self) -> str: ...
    @property
    def item_id(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    @property
    def answer(self) -> object: ...
    @property
    def held_out(self) -> bool: ...


def normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokens_with_offsets(text: str) -> list[tuple[str, int, int]]:
    """(token, start, end) over `text` as given; the offsets index the original string.

    NFKC can change lengths for a few compatibility characters; case-folding per token keeps
    the offsets pointing at the original text for everything else."""
    return [(normalise(m.group()), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def tokens(text: str) -> list[str]:
    if text.isascii():  # NFKC changes no ASCII text, and its letters and digits are these
        return _ASCII_TOKEN.findall(text.lower())
    return _TOKEN.findall(normalise(text))


@dataclass(frozen=True)
class IndexedItem:
    benchmark: str
    item_id: str
    held_out: bool
    prompt: str
    answer: str
    grams: tuple[int, int]  # distinct grams in (prompt, answer)
    answer_tokens: int


@dataclass
class ItemHit:
    """One item found in one record: which of its grams, and where (token positions)."""

    item: int
    grams: set[int] = field(default_factory=set)  # distinct gram hashes matched
    field_grams: list[set[int]] = field(default_factory=lambda: [set(), set()])
    first_token: int = 1 << 62
    last_token: int = -1


class ItemIndex:
    def __init__(self, items: Iterable[EvalItemLike], *, n: int, min_tokens: int) -> None:
        if not 1 <= min_tokens <= n:
            raise ValueError("need 1 <= min_tokens <= n")
        self.n = n
        self.min_tokens = min_tokens
        self.vocabulary: dict[str, int] = {}
        self.items: list[IndexedItem] = []
        self.unscannable: list[tuple[str, str]] = []  # (benchmark, item_id) with no grams
        postings: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.lengths: set[int] = set()
        for item in items:
            fields = (str(item.prompt or ""), str(item.answer if item.answer is not None else ""))
            counts = [0, 0]
            lengths = [0, 0]
            number = len(self.items)
            for which, text in enumerate(fields):
                ids = np.array([self._id(t) for t in tokens(text)], dtype=np.uint64)
                lengths[which] = len(ids)
                if len(ids) < min_tokens:
                    continue
                k = min(n, len(ids))
                self.lengths.add(k)
                distinct = set(_gram_hashes(ids, k).tolist())
                counts[which] = len(distinct)
                for gram in distinct:
                    postings[gram].append((number, which))
            if not any(counts):
                self.unscannable.append((item.benchmark, str(item.item_id)))
                continue
            self.items.append(
                IndexedItem(
                    benchmark=item.benchmark,
                    item_id=str(item.item_id),
                    held_out=item.held_out,
                    prompt=fields[0],
                    answer=fields[1],
                    grams=(counts[0], counts[1]),
                    answer_tokens=lengths[ANSWER],
                )
            )
        self.postings = dict(postings)
        self._keys = np.array(sorted(self.postings), dtype=np.uint64)
        # A one-bit-per-slot filter on the top bits of each gram: most windows of a record are
        # in no item, and one gather rules them out before the binary search of the keys.
        bits = int(np.clip(np.ceil(np.log2(max(len(self._keys), 1) * 16)), 16, 28))
        self._shift = np.uint64(64 - bits)
        self._filter = np.zeros(1 << bits, dtype=bool)
        self._filter[self._keys >> self._shift] = True

    def _id(self, token: str) -> int:
        found = self.vocabulary.get(token)
        if found is None:
            found = self.vocabulary[token] = len(self.vocabulary) + 1
        return found

    def __len__(self) -> int:
        return len(self.items)

    def search(self, records: Sequence[str]) -> list[dict[int, ItemHit]]:
        """For each record, the items with at least one gram in it (by item number)."""
        hits: list[dict[int, ItemHit]] = [{} for _ in records]
        if not self.items or not records:
            return hits
        ids: list[int] = []
        starts: list[int] = []
        lookup = self.vocabulary.get
        for record in records:
            starts.append(len(ids))
            ids.extend(map(lookup, tokens(record), repeat(0)))
            ids.append(0)  # a separator: no gram spans two records
        doc = np.array(ids, dtype=np.uint64)
        record_starts = np.array(starts, dtype=np.int64)
        for k in sorted(self.lengths):
            if len(doc) < k:
                continue
            hashes = _gram_hashes(doc, k)
            valid = _windows_without_zero(doc, k)
            candidates = np.flatnonzero(valid & self._filter[hashes >> self._shift])
            place = np.searchsorted(self._keys, hashes[candidates])
            place[place >= len(self._keys)] = 0
            found = candidates[self._keys[place] == hashes[candidates]]
            owners = np.searchsorted(record_starts, found, side="right") - 1
            for position, owner in zip(found.tolist(), owners.tolist(), strict=True):
                gram = int(hashes[position])
                offset = position - starts[owner]
                for number, which in self.postings[gram]:
                    hit = hits[owner].get(number)
                    if hit is None:
                        hit = hits[owner][number] = ItemHit(number)
                    hit.grams.add(gram)
                    hit.field_grams[which].add(gram)
                    hit.first_token = min(hit.first_token, offset)
                    hit.last_token = max(hit.last_token, offset + k - 1)
        return hits

    def coverage(self, hit: ItemHit) -> float:
        item = self.items[hit.item]
        return len(hit.grams) / (item.grams[PROMPT] + item.grams[ANSWER])

    def field_coverage(self, hit: ItemHit, which: int) -> float:
        total = self.items[hit.item].grams[which]
        return len(hit.field_grams[which]) / total if total else 0.0


def span_text(record: str, hit: ItemHit, *, limit: int = 400) -> tuple[int, int, str]:
    """The characters of `record` from the first to the last matched token: (start, end, text)."""
    found = tokens_with_offsets(record)
    first = found[min(hit.first_token, len(found) - 1)]
    last = found[min(hit.last_token, len(found) - 1)]
    start, end = first[1], last[2]
    text = record[start:end]
    if len(text) > limit:
        text = text[: limit // 2] + " … " + text[-limit // 2 :]
    return start, end, text


def _gram_hashes(ids: np.ndarray, k: int) -> np.ndarray:
    """Hash of every window of `k` ids: (len(ids) - k + 1,) uint64."""
    count = len(ids) - k + 1
    out = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            out = out * _PRIME + ids[j : j + count]
        out ^= _LENGTH_SALT * np.uint64(k)
    return out


def _windows_without_zero(ids: np.ndarray, k: int) -> np.ndarray:
    zeros = np.concatenate([[0], np.cumsum(ids == 0)])
    return (zeros[k:] - zeros[:-k]) == 0
