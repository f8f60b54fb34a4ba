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

Tokens and grams are hashed to 64-bit integers with numpy over a whole batch of records, so a
gigabyte of text costs a few vectorised passes over its bytes and no Python step per token:
each record is rewritten once (C string methods) so that its tokens are exactly the runs of
`[a-z0-9]` and non-ASCII bytes of its UTF-8 (`token_text`); a token's hash is a polynomial
over its bytes, finalised with its length; a gram's hash is a polynomial over its tokens'
hashes, salted with its length. The index and the scan share these functions, so a gram
matches exactly when its tokens are the same (up to a 2**-64 chance of a collision, which can
only add a candidate, never hide one). No Django here.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

_TOKEN = re.compile(r"[^\W_]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
# Non-ASCII characters that are not letters or digits: in normalised text, every other
# non-ASCII character belongs to a token, so after these become spaces a token is a run of
# [a-z0-9] and non-ASCII bytes. A character class: one linear pass, no backtracking.
_NON_ASCII_SEPARATORS = re.compile(r"[^\w\x00-\x7f]+")
# A fixed random odd value for each byte a token is made of ([a-z0-9], and in token_text's
# output every non-ASCII byte is part of a letter or digit), 0 for the separators. Seeded:
# every process and every run hash alike.
_BYTE_VALUES = np.random.default_rng(0x5EED).integers(1, 1 << 63, 256, dtype=np.uint64) | 1
_BYTE_VALUES[[b for b in range(0x80) if not chr(b).isdigit() and not chr(b).islower()]] = 0
_IN_TOKEN = _BYTE_VALUES != 0
# Records are searched together up to about this many characters, and their bytes hashed in
# slices of at most this many: numpy's arrays cost a few tens of bytes per byte of text.
BATCH_BYTES = 1 << 20
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


def token_text(text: str) -> str:
    """`text` normalised, with every non-ASCII character that is not a letter or digit made a
    space: its tokens (`tokens(text)`) are then its runs of [a-z0-9] and non-ASCII
    characters, which `token_hashes` finds in its UTF-8 bytes."""
    if text.isascii():
        return text.lower()
    return _NON_ASCII_SEPARATORS.sub(" ", normalise(text))


def token_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The hash of every token of `texts`, in order, and where each text's tokens start:
    (hashes (T,) uint64, bounds (len(texts) + 1,) int64); text i's tokens are
    hashes[bounds[i]:bounds[i + 1]]. Texts are joined by spaces, so no token spans two.

    A token's hash is sum(value[byte] * _PRIME**offset) over its bytes, offsets counted from
    its first byte: one prefix sum over a slice of the bytes gives every token's sum at once,
    shifted by _PRIME**start, which multiplying by the inverse power undoes. Slices hold at
    most BATCH_BYTES (or one longer token), so the 8-byte-per-byte arrays stay bounded however
    far normalisation expands a hostile text."""
    parts = [token_text(text).encode("utf-8", "replace") for text in texts]
    sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) + 1
    text_starts = np.cumsum(sizes) - sizes + 1  # byte offset of each text in `data`
    data = np.frombuffer(b" " + b" ".join(parts) + b" ", dtype=np.uint8)
    inside = np.take(_IN_TOKEN, data)  # (L,) take: twice the speed of indexing
    edges = np.flatnonzero(inside[1:] != inside[:-1]) + 1  # starts and ends, alternating
    starts, ends = edges[0::2], edges[1::2]  # (T,) a space on either side: never at 0 or L
    hashes = np.empty(len(starts), dtype=np.uint64)
    first = 0
    while first < len(starts):
        last = max(first + 1, int(np.searchsorted(ends, starts[first] + BATCH_BYTES, "right")))
        origin = starts[first] - 1  # a separator: the prefix sum starts at 0 there
        piece = data[origin : ends[last - 1]]
        powers, inverses = _powers(len(piece))
        begin, end = starts[first:last] - origin, ends[first:last] - origin
        with np.errstate(over="ignore"):
            prefix = np.cumsum(np.take(_BYTE_VALUES, piece) * powers)
            sums = (prefix[end - 1] - prefix[begin - 1]) * inverses[begin]
            lengths = (end - begin).astype(np.uint64)
            hashes[first:last] = _mix(sums ^ (lengths * _LENGTH_SALT))
        first = last
    bounds = np.searchsorted(starts, text_starts)
    return hashes, np.append(bounds, len(hashes))


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
        self.items: list[IndexedItem] = []
        self.unscannable: list[tuple[str, str]] = []  # (benchmark, item_id) with no grams
        postings: dict[int, list[tuple[int, int]]] = defaultdict(list)
        by_length: dict[int, set[int]] = defaultdict(set)
        for item, field_ids in _with_token_hashes(items):
            fields = (str(item.prompt or ""), str(item.answer if item.answer is not None else ""))
            counts = [0, 0]
            lengths = [0, 0]
            number = len(self.items)
            for which, ids in enumerate(field_ids):
                lengths[which] = len(ids)
                if len(ids) < min_tokens:
                    continue
                k = min(n, len(ids))
                distinct = set(_gram_hashes(ids, k).tolist())
                by_length[k] |= distinct
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
        # Whole short fields (min_tokens..n - 1 tokens) are few: their grams get small tables
        # of their own, which stay in the cache while the n-grams' large one is searched.
        self._grams = {k: _GramSet(grams) for k, grams in sorted(by_length.items())}
        self.lengths = set(self._grams)

    def __len__(self) -> int:
        return len(self.items)

    def search(self, records: Sequence[str]) -> list[dict[int, ItemHit]]:
        """For each record, the items with at least one gram in it (by item number)."""
        hits: list[dict[int, ItemHit]] = [{} for _ in records]
        if not self.items:
            return hits
        for first, last in _byte_batches(records):
            self._search_batch(records[first:last], hits[first:last])
        return hits

    def _search_batch(self, records: Sequence[str], hits: list[dict[int, ItemHit]]) -> None:
        doc, bounds = token_hashes(records)
        owner_of_token = np.repeat(np.arange(len(records)), np.diff(bounds))
        tokens_left = bounds[owner_of_token + 1] - np.arange(len(doc))  # to its record's end
        for k, hashes in _grams_of_lengths(doc, self._grams):
            found = self._grams[k].find(hashes, tokens_left[: len(hashes)] >= k)
            for position, owner in zip(found.tolist(), owner_of_token[found].tolist(), strict=True):
                gram = int(hashes[position])
                offset = position - int(bounds[owner])
                for number, which in self.postings[gram]:
                    hit = hits[owner].get(number)
                    if hit is None:
                        hit = hits[owner][number] = ItemHit(number)
                    hit.grams.add(gram)
                    hit.field_grams[which].add(gram)
                    hit.first_token = min(hit.first_token, offset)
                    hit.last_token = max(hit.last_token, offset + k - 1)

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


class _GramSet:
    """Distinct gram hashes of one length: sorted, behind a one-bit-per-slot filter on their top
    bits (16 slots per gram), since most windows of a record are in no item and one gather
    rules them out before the binary search."""

    def __init__(self, grams: set[int]) -> None:
        self.keys = np.sort(np.fromiter(grams, dtype=np.uint64, count=len(grams)))
        bits = int(np.clip(np.ceil(np.log2(max(len(self.keys), 1) * 16)), 16, 28))
        self.shift = np.uint64(64 - bits)
        self.filter = np.zeros(1 << bits, dtype=bool)
        self.filter[self.keys >> self.shift] = True

    def find(self, hashes: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """Positions of `hashes` (allowed ones only) that are in the set, ascending."""
        candidates = np.flatnonzero(allowed & self.filter[hashes >> self.shift])
        place = np.searchsorted(self.keys, hashes[candidates])
        place[place >= len(self.keys)] = 0
        found: np.ndarray = candidates[self.keys[place] == hashes[candidates]]
        return found


def _grams_of_lengths(ids: np.ndarray, lengths: Iterable[int]) -> Iterable[tuple[int, np.ndarray]]:
    """(k, hash of every window of k ids) for each k of `lengths`, ascending: each length's
    polynomial extends the one before by one id, so all of them cost max(lengths) passes."""
    wanted = set(lengths)
    running = np.zeros(len(ids), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(1, max(wanted, default=0) + 1):
            if len(ids) < k:
                return
            running = running[: len(ids) - k + 1] * _PRIME + ids[k - 1 :]
            if k in wanted:
                yield k, running ^ (_LENGTH_SALT * np.uint64(k))


def _gram_hashes(ids: np.ndarray, k: int) -> np.ndarray:
    """Hash of every window of `k` ids: (len(ids) - k + 1,) uint64."""
    return next((hashes for _, hashes in _grams_of_lengths(ids, [k])), np.zeros(0, np.uint64))


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every bit of the result depends on every bit of the input."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mixed: np.ndarray = values ^ (values >> np.uint64(31))
        return mixed


_INVERSE = np.uint64(pow(int(_PRIME), -1, 1 << 64))
_CACHED_POWERS = 1 << 21  # two tables of 16 MiB; a longer batch computes its own
_powers_cache: tuple[np.ndarray, np.ndarray] | None = None


def _powers(count: int) -> tuple[np.ndarray, np.ndarray]:
    """(_PRIME ** i, _PRIME ** -i) for i < count, modulo 2**64 (_PRIME is odd, so invertible)."""
    global _powers_cache
    if _powers_cache is not None and len(_powers_cache[0]) >= count:
        return _powers_cache[0][:count], _powers_cache[1][:count]
    size = max(count, min(_CACHED_POWERS, 2 * count))
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(size, _PRIME, dtype=np.uint64)) * _INVERSE  # from ** 0
        inverses = np.cumprod(np.full(size, _INVERSE, dtype=np.uint64)) * _PRIME
    if size <= _CACHED_POWERS:
        _powers_cache = (powers, inverses)
    return powers[:count], inverses[:count]


def _byte_batches(texts: Sequence[str]) -> Iterable[tuple[int, int]]:
    """(first, last) slices of `texts` of about BATCH_BYTES each (a longer text is one slice);
    a character counts as one byte here, four at most in UTF-8."""
    first, size = 0, 0
    for number, text in enumerate(texts):
        if size and size + len(text) > BATCH_BYTES:
            yield first, number
            first, size = number, 0
        size += len(text) + 1
    if first < len(texts):
        yield first, len(texts)


def _with_token_hashes(
    items: Iterable[EvalItemLike],
) -> Iterable[tuple[EvalItemLike, tuple[np.ndarray, np.ndarray]]]:
    """Each item with the token hashes of its prompt and its answer, hashed in batches."""
    batch: list[EvalItemLike] = []
    for item in items:
        batch.append(item)
        if len(batch) >= 4096:
            yield from _hash_fields(batch)
            batch = []
    yield from _hash_fields(batch)


def _hash_fields(
    batch: list[EvalItemLike],
) -> Iterable[tuple[EvalItemLike, tuple[np.ndarray, np.ndarray]]]:
    texts = []
    for item in batch:
        texts.append(str(item.prompt or ""))
        texts.append(str(item.answer if item.answer is not None else ""))
    hashes, bounds = token_hashes(texts)
    for number, item in enumerate(batch):
        prompt, answer, end = bounds[2 * number : 2 * number + 3]
        yield item, (hashes[prompt:answer], hashes[answer:end])
