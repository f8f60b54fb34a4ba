"""IFEval: its 25 instruction checkers and its strict and loose scoring, written for this project.

IFEval (Zhou et al., 2023, "Instruction-Following Evaluation for Large Language Models",
arXiv:2311.07911) gives each prompt one or more verifiable instructions ("answer in fewer
than 100 words", "end with the phrase ...", "wrap the answer in JSON"), each an instruction id
with its arguments. A checker (`checkers.CHECKERS`) decides from the response alone whether
it followed one.

- **Strict**: the response as it is. **Loose**: the response also counts as following when one
  of its variants does: without its first line, its last line, both, and each of those (and the
  response) with every `*` removed, 8 variants in all (the paper's §3: markup and "Sure, here
  is ..." lines that a strict reading punishes). An empty (all whitespace) variant never
  follows.
- An item is correct (prompt level) when every one of its instructions is followed; the
  benchmark's headline is the prompt-level strict accuracy.

Where this differs from the field (google-research `instruction_following_eval`, which
inspect_evals runs) is said in `checkers`, `text` and the evalsuite README: sentences and
capital words are counted without nltk, keywords are matched as literal text, and the scans
the field writes as backtracking regexes are linear here (answers are agent-controlled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState

from evalsuite.ifeval.checkers import (
    CHECKERS,
    Arguments,
    Checker,
    InstructionArgumentsError,
    UnknownInstruction,
)
from evalsuite.ifeval.text import sentence_split

__all__ = [
    "CHECKERS",
    "InstructionArgumentsError",
    "InstructionResult",
    "UnknownInstruction",
    "ifeval_scorer",
    "instruction_results",
    "loose_variants",
    "sentence_split",
]


@dataclass(frozen=True)
class InstructionResult:
    instruction_id: str
    strict: bool
    loose: bool


def loose_variants(response: str) -> list[str]:
    """The response and its 7 loose variants (first line, last line or both removed; each
    with every `*` removed), in the field's order."""
    lines = response.split("\n")
    without_first = "\n".join(lines[1:]).strip()
    without_last = "\n".join(lines[:-1]).strip()
    without_both = "\n".join(lines[1:-1]).strip()
    cut = [response, without_first, without_last, without_both]
    return [cut[0], cut[0].replace("*", ""), *cut[1:], *(text.replace("*", "") for text in cut[1:])]


def _follows(checker: Checker, text: str, args: Arguments) -> bool:
    return bool(text.strip()) and checker(text, args)


def instruction_results(
    response: str, instruction_ids: Sequence[str], kwargs: Sequence[Mapping[str, Any]]
) -> list[InstructionResult]:
    """Strict and loose verdicts for each of an item's instructions. Raises
    `UnknownInstruction` for an id without a checker and `InstructionArgumentsError` for bad
    arguments: the item then fails to score (the benchmark is unscored), never passes."""
    if len(instruction_ids) != len(kwargs):
        raise InstructionArgumentsError(
            f"IFEval item has {len(instruction_ids)} instruction ids but {len(kwargs)} kwargs"
        )
    variants = loose_variants(response)
    results = []
    for instruction_id, values in zip(instruction_ids, kwargs, strict=True):
        checker = CHECKERS.get(instruction_id)
        if checker is None:
            raise UnknownInstruction(
                f"IFEval instruction {instruction_id!r} has no checker (known: the 25 ids of "
                "the published registry, evalsuite/ifeval/checkers.py CHECKERS)"
            )
        args = Arguments(instruction_id, values)
        strict = _follows(checker, response, args)
        loose = strict or any(_follows(checker, text, args) for text in variants[1:])
        results.append(InstructionResult(instruction_id, strict, loose))
    return results


@scorer(metrics=[accuracy(), stderr()])
def ifeval_scorer() -> Scorer:
    """The item is correct when every instruction is followed, strictly; the per-instruction
    verdicts go into the score's metadata for the aggregates (`benchmark_metrics`)."""

    async def score(state: TaskState, target: Target) -> Score:
        response = state.output.completion
        results = instruction_results(
            response, state.metadata["instruction_id_list"], state.metadata["kwargs"]
        )
        missed = [result.instruction_id for result in results if not result.strict]
        return Score(
            value=INCORRECT if missed else CORRECT,
            answer=response[:500],
            explanation=f"not followed (strict): {', '.join(missed)}" if missed else "",
            metadata={
                "instruction_ids": [result.instruction_id for result in results],
                "strict": [result.strict for result in results],
                "loose": [result.loose for result in results],
            },
        )

    return score
