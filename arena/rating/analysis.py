"""Descriptive analyses of a set of battles, beside the fitted ratings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arena.rating.data import Battles


@dataclass(frozen=True)
class LengthEffect:
    decisive_with_length_difference: int
    won_by_longer: int

    @property
    def share(self) -> float | None:
        if not self.decisive_with_length_difference:
            return None
        return self.won_by_longer / self.decisive_with_length_difference


def longer_answer_wins(battles: Battles) -> LengthEffect:
    """Among decisive votes whose answers differ in length, how many the longer answer won.
    (In the study this was 72 %.)"""
    if battles.style is None:
        raise ValueError("needs the answers' lengths (style features)")
    length_diff = battles.style[:, 0]  # sign of (a - b) / (a + b + 1) is the sign of a - b
    decisive = (battles.outcome != 0.5) & (length_diff != 0)
    longer_won = decisive & ((length_diff > 0) == (battles.outcome == 1.0))
    return LengthEffect(
        int(round(float(battles.weight[decisive].sum()))),
        int(round(float(battles.weight[longer_won].sum()))),
    )


def votes_per_pair(battles: Battles) -> dict[tuple[str, str], int]:
    """Battles per unordered pair of models, keyed by the names in sorted order."""
    m = battles.n_models
    low = np.minimum(battles.a, battles.b)
    high = np.maximum(battles.a, battles.b)
    counts = np.bincount(low * m + high, weights=battles.weight, minlength=m * m)
    return {
        (battles.models[i // m], battles.models[i % m]): int(round(c))
        for i, c in enumerate(counts)
        if c > 0
    }
