"""Each benchmark as an `inspect_ai` Task over its items (the pinned split, read offline from
the hub cache): the dataset, the prompt the model sees, and the scorer.
Nothing here touches the network or the database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
    f1,
    scorer,
    stderr,
)
from inspect_ai.solver import Solver, TaskState, generate, system_message

from evalsuite import bbh, scoring
from evalsuite.ifeval import ifeval_scorer
from evalsuite.mask_task import mask_elicitation, mask_scorer
from evalsuite.registry import Benchmark, SampleItem, benchmark_items
from evalsuite.rubric_judges import RUBRIC_SCORERS

# Registry `rubric` names to their judge scorers (each takes the judge model), and the
# solvers of those that ask the model more than once an item (MASK: under pressure, then for
# its belief); the others generate once.
JUDGE_SCORERS: dict[str, Callable[[Model], Scorer]] = {**RUBRIC_SCORERS, "mask": mask_scorer}
RUBRIC_SOLVERS: dict[str, Callable[[], Solver]] = {"mask": mask_elicitation}

INSTRUCTIONS = {
    "exact": "Solve the problem. End your reply with a line of the form 'ANSWER: <final answer>'.",
    "choice": "Choose the correct option. Reply with a line of the form 'ANSWER: <letter>'.",
    "code": "Write the complete Python function. Reply with the code in a ```python block.",
    "includes": "Answer the question briefly.",
    "bbh": "Answer as the examples do, reasoning step by step. End your reply with a line of "
    "the form 'ANSWER: <answer>' (for lettered options, the letter).",
    "f1": "Answer the question about the passage. End your reply with a line of the form "
    "'ANSWER: <short answer>' (a number, a date, or words from the passage).",
}


def benchmark_task(entry: Benchmark, *, judge: Model | None = None) -> Task:
    """The inspect Task for one benchmark; judge-graded ones need the judge model."""
    items = benchmark_items(entry.name)
    dataset = MemoryDataset(
        [_sample(item) for item in items], name=entry.name, location=entry.hub.label
    )
    solver = [RUBRIC_SOLVERS[entry.rubric]() if entry.rubric in RUBRIC_SOLVERS else generate()]
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
    # a conversation (WildBench) reaches the model as its chat messages; other items as text
    messages = item.metadata.get("messages")
    return Sample(
        id=item.id,
        input=chat_messages(messages) if messages else item.model_input,
        target=item.metadata.get("answers") or item.target,
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


def _scorer(entry: Benchmark, judge: Model | None) -> Scorer:
    if entry.scorer == "judge":
        if judge is None:
            raise ValueError(f"{entry.name} is graded by a judge model; none was given")
        return JUDGE_SCORERS[entry.rubric](judge)
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
        elif kind == "bbh":
            meta = state.metadata
            correct = bbh.answer_correct(text, expected, meta["answer_kind"], meta["n_choices"])
        elif kind == "code":
            correct = await asyncio.to_thread(scoring.code_correct, text, expected)
        else:
            raise ValueError(f"no rule scorer for {kind!r}")
        return Score(
            value=CORRECT if correct else INCORRECT,
            answer=scoring.final_answer(text)[:500],
        )

    return score
