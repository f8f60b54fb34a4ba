"""Each benchmark as an `inspect_ai` Task over its items (the pinned split, read offline from
the hub cache): the dataset, the prompt the model sees, and the scorer. For the benchmarks
inspect_evals implements, all three are its own (`upstream.py`, `bbh.py`).
Nothing here touches the network or the database."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from unittest import mock

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    Model,
)
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Score,
    Scorer,
    Target,
    accuracy,
    scorer,
    stderr,
)
from inspect_ai.solver import Solver, TaskState, generate, system_message
from inspect_evals.constants import DEFAULT_FEWSHOT_SEED
from inspect_evals.math.math import expression_exact_match, math_solver

from evalsuite import hub, scoring, upstream
from evalsuite.hub import HubSet
from evalsuite.ifeval import ifeval_scorer
from evalsuite.mask_task import mask_elicitation, mask_scorer
from evalsuite.registry import (
    Benchmark,
    SampleItem,
    benchmark,
    benchmark_items,
    benchmark_samples,
    from_inspect_evals,
)
from evalsuite.rubric_judges import PANEL_SCORERS, RUBRIC_SCORERS

# the module (its package exports the task function under the same name)
mbpp_task = importlib.import_module("inspect_evals.mbpp.mbpp")

# Registry `rubric` names to their judge scorers (each takes the judge model), and the
# solvers of those that ask the model more than once an item (MASK: under pressure, then for
# its belief); the others generate once.
JUDGE_SCORERS: dict[str, Callable[[Model], Scorer]] = {**RUBRIC_SCORERS, "mask": mask_scorer}
RUBRIC_SOLVERS: dict[str, Callable[[], Solver]] = {"mask": mask_elicitation}


class _Rows(list):
    def filter(self, keep: Callable[[dict], bool]) -> _Rows:
        return _Rows(row for row in self if keep(row))


def mbpp_solver() -> list[Solver]:
    """inspect_evals' MBPP solver: its prompt template with its three few-shot examples. It
    builds them inside its task function, from the hub over the network; here its two loaders
    are pointed at the hub cache (the few-shot prompt rows; for the items, which the task reads
    itself, a placeholder)."""
    entry = benchmark("mbpp")
    assert isinstance(entry.hub, HubSet)
    files = hub.records_by_file(entry.name, entry.hub)
    prompts = _Rows(row for path, rows in files.items() if path.startswith("full/") for row in rows)
    with (
        mock.patch.object(mbpp_task, "load_dataset", lambda *args, **kwargs: prompts),
        mock.patch.object(
            mbpp_task, "hf_dataset", lambda *args, **kwargs: MemoryDataset([Sample("")])
        ),
    ):
        return list(mbpp_task.mbpp().solver)


# inspect_evals' own solvers, prompt templates included (HumanEval's instruction is part of
# its items' input, as its record_to_sample writes it)
INSPECT_EVALS_SOLVERS: dict[str, Callable[[], list[Solver]]] = {
    "math": lambda: math_solver(fewshot=0, fewshot_seed=DEFAULT_FEWSHOT_SEED),
    "humaneval": lambda: [generate()],
    "mbpp": mbpp_solver,
}


INSTRUCTIONS = {
    "exact": "Solve the problem. End your reply with a line of the form 'ANSWER: <final answer>'.",
}


def benchmark_task(
    entry: Benchmark, *, judge: Model | None = None, panel: list[Model] | None = None
) -> Task:
    """The inspect Task for one benchmark; judge-graded ones need the judge model, FORTRESS
    its panel of judges (default: the judge alone)."""
    metadata = {
        "domain": entry.domain,
        "kind": entry.kind,
        "held_out": entry.held_out,
        "source": entry.source,
    }
    if from_inspect_evals(entry.name):
        return Task(
            name=entry.name,
            dataset=MemoryDataset(
                benchmark_samples(entry.name), name=entry.name, location=entry.hub.label
            ),
            solver=upstream.solver_for(entry.name),
            scorer=upstream.SCORERS[entry.name](),
            metrics=upstream.metrics(entry.name),
            metadata=metadata,
        )
    items = benchmark_items(entry.name)
    dataset = MemoryDataset(
        [_sample(item) for item in items], name=entry.name, location=entry.hub.label
    )
    solver = [RUBRIC_SOLVERS[entry.rubric]() if entry.rubric in RUBRIC_SOLVERS else generate()]
    if entry.name in INSPECT_EVALS_SOLVERS:
        solver = INSPECT_EVALS_SOLVERS[entry.name]()
    elif entry.scorer in INSTRUCTIONS:
        solver.insert(0, system_message(INSTRUCTIONS[entry.scorer]))
    return Task(
        name=entry.name,
        dataset=dataset,
        solver=solver,
        scorer=_scorer(entry, judge, panel),
        metadata=metadata,
    )


def _sample(item: SampleItem) -> Sample:
    # a conversation (WildBench) reaches the model as its chat messages; other items as text
    messages = item.metadata.get("messages")
    return Sample(
        id=item.id,
        input=chat_messages(messages) if messages else item.model_input,
        target=item.target,
        metadata={"n_choices": len(item.choices), **item.metadata},
    )


_CHAT_ROLES: dict[str, Callable[..., ChatMessage]] = {
    "system": ChatMessageSystem,
    "user": ChatMessageUser,
    "assistant": ChatMessageAssistant,
}


def chat_messages(messages: list[dict[str, str]]) -> list[ChatMessage]:
    """A conversation's turns ({role, content}) as inspect chat messages."""
    converted = []
    for turn in messages:
        role = turn["role"]
        if role not in _CHAT_ROLES:
            raise ValueError(
                f"a conversation turn has role {role!r}, not one of {list(_CHAT_ROLES)}"
            )
        converted.append(_CHAT_ROLES[role](content=turn["content"]))
    return converted


def _scorer(entry: Benchmark, judge: Model | None, panel: list[Model] | None) -> Scorer:
    if entry.scorer == "judge":
        if judge is None:
            raise ValueError(f"{entry.name} is graded by a judge model; none was given")
        if entry.rubric in PANEL_SCORERS:
            return PANEL_SCORERS[entry.rubric](panel or [judge])
        return JUDGE_SCORERS[entry.rubric](judge)
    if entry.scorer == "instructions":
        return ifeval_scorer()
    if entry.scorer == "math":
        return expression_exact_match()
    return rule_scorer(entry.scorer)


@scorer(metrics=[accuracy(), stderr()])
def rule_scorer(kind: str) -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        text = state.output.completion
        expected = target.text
        if kind == "exact":
            correct = scoring.exact_correct(text, expected)
        elif kind == "code":
            correct = await asyncio.to_thread(_code_correct, text, expected, state.metadata)
        else:
            raise ValueError(f"no rule scorer for {kind!r}")
        return Score(
            value=CORRECT if correct else INCORRECT,
            answer=scoring.final_answer(text)[:500],
        )

    return score


def _code_correct(text: str, asserts: str, metadata: dict) -> bool:
    # HumanEval: the asserts are its test and check(entry point), after its prompt
    if "entry_point" in metadata:
        entry_point = metadata["entry_point"]
        return scoring.code_correct(
            text,
            f"{metadata['test']}\n\ncheck({entry_point})\n",
            prompt=metadata["prompt"],
            entry_point=entry_point,
        )
    return scoring.code_correct(text, asserts)
