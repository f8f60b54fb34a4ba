"""Each benchmark as an `inspect_ai` Task over its items (the pinned hub split, read offline from
the hub cache, or the project sample): the dataset, the prompt the model sees, and the scorer.
Nothing here touches the network or the database."""

from __future__ import annotations

import asyncio

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import Model
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Score,
    Scorer,
    Target,
    accuracy,
    f1,
    model_graded_qa,
    scorer,
    stderr,
)
from inspect_ai.solver import TaskState, generate, system_message

from evalsuite import scoring
from evalsuite.ifeval import ifeval_scorer
from evalsuite.registry import Benchmark, SampleItem, benchmark_items
from evalsuite.rubric_judges import RUBRIC_SCORERS

INSTRUCTIONS = {
    "exact": "Solve the problem. End your reply with a line of the form 'ANSWER: <final answer>'.",
    "choice": "Choose the correct option. Reply with a line of the form 'ANSWER: <letter>'.",
    "code": "Write the complete Python function. Reply with the code in a ```python block.",
    "includes": "Answer the question briefly.",
    "f1": "Answer the question about the passage. End your reply with a line of the form "
    "'ANSWER: <short answer>' (a number, a date, or words from the passage).",
}
GRADE_FORMAT = (
    "First explain your reasoning in a sentence or two, then end with 'GRADE: C' (the "
    "submission meets the criterion) or 'GRADE: I' (it does not), on a line of its own."
)


def benchmark_task(entry: Benchmark, *, judge: Model | None = None) -> Task:
    """The inspect Task for one benchmark; judge-graded ones need the judge model."""
    items = benchmark_items(entry.name)
    location = entry.hub.label if entry.hub else entry.sample_file
    dataset = MemoryDataset([_sample(item) for item in items], name=entry.name, location=location)
    solver = [generate()]
    if entry.scorer in INSTRUCTIONS:
        solver.insert(0, system_message(INSTRUCTIONS[entry.scorer]))
    return Task(
        name=entry.name,
        dataset=dataset,
        solver=solver,
        scorer=_scorer(entry, judge),
        metadata={
            "domain": entry.domain,
            "kind": entry.kind,
            "held_out": entry.held_out,
            "source": entry.source,
        },
    )


def _sample(item: SampleItem) -> Sample:
    return Sample(
        id=item.id,
        input=item.prompt,
        target=item.metadata.get("answers") or item.target,
        metadata={"n_choices": len(item.choices), **item.metadata},
    )


def _scorer(entry: Benchmark, judge: Model | None) -> Scorer:
    if entry.scorer == "judge":
        if judge is None:
            raise ValueError(f"{entry.name} is graded by a judge model; none was given")
        if entry.rubric:
            return RUBRIC_SCORERS[entry.rubric](judge)
        return model_graded_qa(
            instructions=f"{entry.judge_instructions} {GRADE_FORMAT}", model=judge
        )
    if entry.scorer == "instructions":
        return ifeval_scorer()
    if entry.scorer == "f1":
        return f1(answer_fn=scoring.final_answer)
    return rule_scorer(entry.scorer)


@scorer(metrics=[accuracy(), stderr()])
def rule_scorer(kind: str) -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        text = state.output.completion
        expected = target.text
        if kind == "exact":
            correct = scoring.exact_correct(text, expected)
        elif kind == "choice":
            correct = scoring.choice_correct(text, expected, state.metadata["n_choices"])
        elif kind == "includes":
            correct = scoring.includes_correct(text, expected)
        elif kind == "code":
            correct = await asyncio.to_thread(scoring.code_correct, text, expected)
        else:
            raise ValueError(f"no rule scorer for {kind!r}")
        return Score(
            value=CORRECT if correct else INCORRECT,
            answer=scoring.final_answer(text)[:500],
        )

    return score
