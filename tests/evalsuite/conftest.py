from __future__ import annotations

from agents.services import agent_create
from evalsuite.models import EvalRun
from tests.factories import eval_run, running_phase


def stored_run(
    phase, role: str, scores: dict[str, float], *, agent=None, label: str = ""
) -> EvalRun:
    """A collected evaluation run with the given benchmark scores (as `evaluations_collect`
    would leave it), each over 5 items with a standard error of 0.01."""
    return eval_run(phase, role, scores, agent=agent, label=label, stderr=0.01, n=5)


def instruct_below_base_phase(agent_name: str = "zed"):
    """The demo's winogrande (issue 27): on 5 items the base got 3 right (0.600 ± 0.245), the
    instruct reference and the agent `agent_name` (model `<name>-1`) none. Per-item values are
    stored, as the runner stores them."""
    phase = running_phase()
    eval_run(phase, EvalRun.Role.BASE, {"winogrande": 0}, items={"winogrande": [1, 1, 1, 0, 0]})
    eval_run(phase, EvalRun.Role.INSTRUCT, {"winogrande": 0}, items={"winogrande": [0] * 5})
    eval_run(phase, EvalRun.Role.AGENT, {"winogrande": 0}, agent=agent_create(name=agent_name),
             label=f"{agent_name}-1", items={"winogrande": [0] * 5})  # fmt: skip
    return phase
