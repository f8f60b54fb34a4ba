"""Near-duplicate prompts, grouped, and the weight each group's battles get in the fit.

Chatbot Arena found a few prompts ("hi", a viral riddle) asked thousands of times, enough to
sway its leaderboard, and de-duplicates its most frequent prompts. Here:

- **Normalised text** (`normalise`): NFKC, case folded, every run of non-word characters one
  space, trimmed: "Hi!!", " hi " and "HI" are one prompt. `prompt_key` is a 52-bit hash of it
  (52 bits: a float64 holds it exactly, so the fit's columnar reader carries it as a float).
- **Near duplicates** (`near_duplicate_groups`): MinHash over the character 5-grams of the
  normalised text (its first `SHINGLE_CHARS` characters), `NUM_PERM` = 64 hash functions in
  `BANDS` = 8 bands of 8. Two prompts whose 8 minimums agree in any band are joined, and
  groups are the connected components: with these bands, prompts of Jaccard similarity 0.8
  are joined with probability 0.9 and of 0.5 with probability 0.03 (1 − (1 − J⁸)⁸). Everything
  is seeded and sorted: the same prompts give the same groups in any order of input.
  Memory: 8 band keys (64 bytes) a prompt, plus one sort per band.
- **Weight** (`group_weights`): each battle of a group of g battles (within the battles being
  fitted) weighs in proportion to 1/√g, so a group counts √g times as much as a prompt asked
  once: 50 copies of a prompt weigh as much as 7.1 distinct prompts, less than 10 do. The
  weights are then scaled to sum to the number of battles: down-weighting moves influence
  from frequent prompts to rare ones without pretending there were fewer votes, so a fit
  whose prompts are all asked equally often (one suggested prompt for everyone, say) is
  exactly the unweighted one, intervals included.

Pure numpy: no Django.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

SHINGLE = 5
SHINGLE_CHARS = 4_000  # a prompt's first characters shingled: bounded time and memory
NUM_PERM = 64
BANDS = 8
ROWS = NUM_PERM // BANDS
KEY_BITS = 52
WEIGHT_RULE = "1/sqrt(group size), scaled to sum to the number of battles"
_PRIME = (1 << 31) - 1  # hashes and permutations modulo a Mersenne prime: no uint64 overflow
_rng = np.random.default_rng(20240611)
_PERM_A = _rng.integers(1, _PRIME, NUM_PERM, dtype=np.uint64)
_PERM_B = _rng.integers(0, _PRIME, NUM_PERM, dtype=np.uint64)
_NON_WORD = re.compile(r"[\W_]+")


def normalise(text: str) -> str:
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def prompt_key(text: str) -> int:
    """A 52-bit hash of the normalised prompt: equal for prompts that differ only in case,
    spacing, punctuation or Unicode form."""
    digest = hashlib.blake2b(normalise(text).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - KEY_BITS)


def band_keys(text: str) -> NDArray[np.uint64]:
    """(BANDS,) one key per band of the prompt's MinHash signature."""
    normal = normalise(text)[:SHINGLE_CHARS]
    data = normal.encode("utf-8")
    if len(data) < SHINGLE:
        data = data.ljust(SHINGLE, b"\0")  # a short prompt is one shingle: itself
    window = np.lib.stride_tricks.sliding_window_view(np.frombuffer(data, np.uint8), SHINGLE)
    # A polynomial hash of each 5-byte shingle, modulo the prime (each step stays < 2^40).
    shingles = np.zeros(len(window), dtype=np.uint64)
    for column in range(SHINGLE):
        shingles = (shingles * np.uint64(257) + window[:, column].astype(np.uint64)) % _PRIME
    shingles = np.unique(shingles)
    # (NUM_PERM, S): a·x + b < 2^62 for a, x, b < 2^31.
    hashed = (_PERM_A[:, None] * shingles[None, :] + _PERM_B[:, None]) % _PRIME
    signature = hashed.min(axis=1).reshape(BANDS, ROWS)  # (BANDS, ROWS)
    # Each band's minimums as one key: a polynomial in the prime, mixed with the band number.
    key = np.zeros(BANDS, dtype=np.uint64)
    for column in range(ROWS):
        key = (key * np.uint64(1_000_003) + signature[:, column]) & np.uint64((1 << 61) - 1)
    return key ^ (np.arange(BANDS, dtype=np.uint64) << np.uint64(61))


def near_duplicate_groups(prompts: Iterable[str], count: int) -> NDArray[np.intp]:
    """(count,) a group number per prompt, numbered by each group's first prompt: prompts
    sharing any band key are in one group (and so, transitively, their neighbours)."""
    keys = np.empty((count, BANDS), dtype=np.uint64)
    filled = 0
    for i, text in enumerate(prompts):
        if i >= count:
            raise ValueError(f"more than {count} prompts")
        keys[i] = band_keys(text)
        filled += 1
    if filled != count:
        raise ValueError(f"{filled} prompts, expected {count}")
    return groups_of_band_keys(keys)


def groups_of_band_keys(keys: NDArray[np.uint64]) -> NDArray[np.intp]:
    """Connected components of "shares a band key", numbered in order of first member."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    sources, targets = [], []
    for band in range(keys.shape[1]):
        order = np.argsort(keys[:, band], kind="stable")
        same = keys[order[1:], band] == keys[order[:-1], band]
        sources.append(order[:-1][same])
        targets.append(order[1:][same])
    source = np.concatenate(sources)
    target = np.concatenate(targets)
    graph = coo_matrix((np.ones(len(source), np.int8), (source, target)), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    # Renumber by first appearance, so the numbers do not depend on scipy's labelling.
    _, first = np.unique(component, return_index=True)
    rank = np.empty(len(first), dtype=np.intp)
    rank[np.argsort(np.argsort(first))] = np.arange(len(first))
    return rank[component]


def group_weights(groups: NDArray[np.integer]) -> NDArray[np.float64]:
    """(n,) each battle's weight in the fit: 1/√(size of its group among these battles),
    scaled so the weights sum to n."""
    return dedup_weights(groups, "")[0]


def dedup_weights(
    groups: NDArray[np.integer], source: str
) -> tuple[NDArray[np.float64], dict[str, object]]:
    """The weights (`group_weights`) and what a snapshot records about them: the rule, its
    parameters, and how many battles it touched. One sort of the groups for both (about a
    second for a million battles on this loaded machine)."""
    n = len(groups)
    if n == 0:
        return np.zeros(0), {"rule": WEIGHT_RULE, "groups_from": source, "battles": 0}
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    weights = 1.0 / np.sqrt(counts[inverse].astype(np.float64))
    weights *= n / weights.sum()
    grouped = (counts > 1)[inverse]  # (n,) in a group of several
    summary = {
        "rule": WEIGHT_RULE,
        "groups_from": source,
        "normalise": "NFKC, casefold, non-word runs to one space",
        "near_duplicates": {
            "minhash": f"{NUM_PERM} hashes of character {SHINGLE}-grams",
            "bands": BANDS,
            "rows": ROWS,
        },
        "battles": n,
        "groups_of_several": int((counts > 1).sum()),
        "battles_grouped": int(grouped.sum()),
        "largest_group": int(counts.max()),
        # What the battles in groups of several are of all battles, and of the fit's weight.
        "grouped_share_of_battles": round(float(grouped.sum()) / n, 4),
        "grouped_share_of_fit": round(float(weights[grouped].sum()) / n, 4),
        "min_weight": round(float(weights.min()), 4),
        "max_weight": round(float(weights.max()), 4),
    }
    return weights, summary


def dedup_summary(groups: NDArray[np.integer], source: str) -> dict[str, object]:
    """`dedup_weights`'s record alone."""
    return dedup_weights(groups, source)[1]
