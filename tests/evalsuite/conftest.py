from __future__ import annotations

from evalsuite.models import EvalRun
from tests.factories import eval_run


def stored_run(
    phase, role: str, scores: dict[str, float], *, agent=None, label: str = ""
) -> EvalRun:
    """A collected evaluation run with the given benchmark scores (as `evaluations_collect`
    would leave it), each over 5 items with a standard error of 0.01."""
    return eval_run(phase, role, scores, agent=agent, label=label, stderr=0.01, n=5)
