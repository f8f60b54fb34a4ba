from __future__ import annotations

from evalsuite.models import BenchmarkResult, EvalRun
from evalsuite.registry import benchmark


def stored_run(
    phase, role: str, scores: dict[str, float], *, agent=None, label: str = ""
) -> EvalRun:
    """A collected evaluation run with the given benchmark scores (as `evaluations_collect`
    would leave it)."""
    run = EvalRun.objects.create(
        phase=phase, role=role, agent=agent, model_label=label or role,
        base_url="http://127.0.0.1:9/v1", served_model_name=label or role,
        benchmarks=list(scores), log_dir="", state=EvalRun.State.DONE,
    )  # fmt: skip
    for name, score in scores.items():
        entry = benchmark(name)
        BenchmarkResult.objects.create(
            run=run, benchmark=name, domain=entry.domain, kind=entry.kind,
            held_out=entry.held_out, score=score, stderr=0.01, n=5,
        )  # fmt: skip
    return run
