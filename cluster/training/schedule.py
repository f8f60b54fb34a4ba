"""The learning-rate schedule every training script here uses (and the tiny-model kit's own
pretraining): a multiplier of the base rate per optimizer step."""

from __future__ import annotations

import math
from collections.abc import Callable


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warmup, then cosine decay to 10 %."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    return f
