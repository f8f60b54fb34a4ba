"""Near-duplicate prompts, grouped, and the weight each group's battles get in the fit.

Chatbot Arena found a few prompts ("hi", a viral riddle) asked thousands of times, enough to
sway its leaderboard, and de-duplicates its most frequent prompts. Here:

- **Normalised text** (`normalise`): NFKC, case folded, every run of non-word characters one
  space, trimmed: "Hi!!", " hi " and "HI" are one prompt. `prompt_key` is a 52-bit hash of it
  (52 bits: a float64 holds it exactly, so the fit's columnar reader carries it as a float).
- **Near duplicates** (`near_duplicate_groups`): MinHash over the character 5-grams of the
  normalised text (its first `SHINGLE_CHARS` characters), `NUM_PERM` = 64 hash functions.
  Groups are stars, not chains: prompts are taken in a fixed order (the caller's: oldest
  first), and each joins the existing group whose *representative* (first prompt) it is
  closest to, if their estimated Jaccard similarity (the share of the 64 MinHash values that
  agree) is at least `JOIN_SIMILARITY` = 0.8; else it starts a group of its own. There is no
  transitivity: a chain of one-character morphs, or a thousand "What is the capital of X?",
  does not percolate into one group, since every member must be near the one representative.
  Candidates come from `BANDS` = 8 bands of 8 values (a representative is a candidate when
  any band agrees: found with probability 0.9 at Jaccard 0.8), so the work is one signature
  comparison per candidate, at most `BANDS` × `BUCKET_MAX` candidates (the oldest
  representatives of each band key) so templated prompts cannot make it quadratic. Memory: a
  64-value signature (256 bytes) a prompt.
- **Weight** (`group_weights`): each battle of a group of g ≥ 2 battles (within the battles
  being fitted) weighs 1/√g, a battle whose prompt is alone weighs 1, and nothing is scaled
  up: no battle ever weighs more than 1, so a voter's unique prompts cannot gain weight from
  other people's duplicates. 50 copies of a prompt weigh as much as 7.1 distinct prompts.
  The weights sum to less than the number of battles when there are duplicates: they carry
  less information, and the intervals widen accordingly (`arena/leaderboard/README.md`).

Pure numpy: no Django.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

SHINGLE = 5
SHINGLE_CHARS = 4_000  # a prompt's first characters shingled: bounded time and memory
NUM_PERM = 64
BANDS = 8
ROWS = NUM_PERM // BANDS
KEY_BITS = 52
# A prompt joins a group when at least this share of its MinHash values equals the group's
# representative's (an estimate of their Jaccard similarity over 5-grams).
JOIN_SIMILARITY = 0.8
# Representatives kept per band key: templated prompts ("What is the capital of X?") collide
# in some bands by the thousand, and an unbounded bucket would make grouping quadratic. A
# prompt is compared with at most BANDS × BUCKET_MAX representatives, in one numpy step.
BUCKET_MAX = 16
WEIGHT_RULE = "1/sqrt(group size) for a group of several, 1 alone; never rescaled upward"
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


def minhash_signature(text: str) -> NDArray[np.uint32]:
    """(NUM_PERM,) the prompt's MinHash values (each below 2^31)."""
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
    return hashed.min(axis=1).astype(np.uint32)


def band_keys_of(signature: NDArray[np.unsignedinteger]) -> NDArray[np.uint64]:
    """(BANDS,) one key per band of a MinHash signature."""
    bands = signature.astype(np.uint64).reshape(BANDS, ROWS)
    # Each band's minimums as one key: a polynomial in the prime, mixed with the band number.
    key = np.zeros(BANDS, dtype=np.uint64)
    for column in range(ROWS):
        key = (key * np.uint64(1_000_003) + bands[:, column]) & np.uint64((1 << 61) - 1)
    return key ^ (np.arange(BANDS, dtype=np.uint64) << np.uint64(61))


def band_keys(text: str) -> NDArray[np.uint64]:
    """(BANDS,) one key per band of the prompt's MinHash signature."""
    return band_keys_of(minhash_signature(text))


def near_duplicate_groups(prompts: Iterable[str], count: int) -> NDArray[np.intp]:
    """(count,) a group number per prompt, numbered by each group's first prompt, in the
    order given (`star_groups`)."""
    signatures = np.empty((count, NUM_PERM), dtype=np.uint32)
    filled = 0
    for i, text in enumerate(prompts):
        if i >= count:
            raise ValueError(f"more than {count} prompts")
        signatures[i] = minhash_signature(text)
        filled += 1
    if filled != count:
        raise ValueError(f"{filled} prompts, expected {count}")
    return star_groups(signatures)


def star_groups(signatures: NDArray[np.unsignedinteger]) -> NDArray[np.intp]:
    """(n,) a group per signature, in order: each joins the group whose representative (first
    member) shares the most MinHash values with it, if at least `JOIN_SIMILARITY` of them
    (ties: the older group); else it represents a new group. Only representatives are
    indexed by band, and a member is compared with representatives only: no chains."""
    n = len(signatures)
    groups = np.empty(n, dtype=np.intp)
    representatives: list[int] = []  # group number -> index of its first prompt
    by_band: list[dict[int, list[int]]] = [{} for _ in range(BANDS)]
    needed = int(np.ceil(JOIN_SIMILARITY * NUM_PERM))
    for i in range(n):
        keys = band_keys_of(signatures[i]).tolist()
        candidates: set[int] = set()
        for band, key in enumerate(keys):
            candidates.update(by_band[band].get(key, ()))
        best = -1
        if candidates:
            ordered = sorted(candidates)
            reps = np.fromiter((representatives[g] for g in ordered), np.intp, len(ordered))
            agree = np.count_nonzero(signatures[reps] == signatures[i], axis=1)
            top = int(np.argmax(agree))  # the first of the best: the oldest group
            if agree[top] >= needed:
                best = ordered[top]
        if best < 0:
            best = len(representatives)
            representatives.append(i)
            for band, key in enumerate(keys):
                bucket = by_band[band].setdefault(key, [])
                if len(bucket) < BUCKET_MAX:
                    bucket.append(best)
        groups[i] = best
    return groups


def group_weights(groups: NDArray[np.integer]) -> NDArray[np.float64]:
    """(n,) each battle's weight in the fit: 1/√(size of its group among these battles), so
    1 for a prompt alone and never more."""
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
    # No rescaling: duplicates carry less information, and scaling the weights back up to n
    # would hand the missing weight to everyone else's prompts (an attacker's unique ones).
    weights = 1.0 / np.sqrt(counts[inverse].astype(np.float64))
    grouped = (counts > 1)[inverse]  # (n,) in a group of several
    summary = {
        "rule": WEIGHT_RULE,
        "groups_from": source,
        "normalise": "NFKC, casefold, non-word runs to one space",
        "near_duplicates": {
            "minhash": f"{NUM_PERM} hashes of character {SHINGLE}-grams",
            "bands": BANDS,
            "rows": ROWS,
            "join": f"share of equal MinHash values with the group's first prompt >= {JOIN_SIMILARITY}",
        },
        "battles": n,
        "groups_of_several": int((counts > 1).sum()),
        "battles_grouped": int(grouped.sum()),
        "largest_group": int(counts.max()),
        # What the battles in groups of several are of all battles, and of the fit's weight.
        "grouped_share_of_battles": round(float(grouped.sum()) / n, 4),
        "grouped_share_of_fit": round(float(weights[grouped].sum() / weights.sum()), 4),
        "min_weight": round(float(weights.min()), 4),
        "max_weight": round(float(weights.max()), 4),
    }
    return weights, summary


def dedup_summary(groups: NDArray[np.integer], source: str) -> dict[str, object]:
    """`dedup_weights`'s record alone."""
    return dedup_weights(groups, source)[1]
