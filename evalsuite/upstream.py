"""The multiple-choice, short-answer and reading benchmarks as inspect_evals implements them.

For each of these benchmarks the dataset, the prompt and the scorer are inspect_evals' own
(`inspect_evals` 0.26.0, pinned): its `record_to_sample`, the de-duplication and the known-bad
rows it drops, its choice shuffling (with its seed), its solver and its scorer. Only the
reading differs: inspect_evals downloads each set with `hf_dataset`, and the arena reads the
same pinned rows offline from the hub cache (`hub.records`), so the rows reach
`record_to_sample` here. The registry's items (what audits and reports see) are derived from
these samples (`records.sample_item`).

What stays the project's, and why:
- few-shot prompts that inspect_evals draws from a split the arena does not pin (GSM8K's train
  split, WinoGrande's, DROP's): those tasks run zero-shot, as their `fewshot=0` options do;
- BBQ's bias scores (`benchmark_metrics.bbq_metrics`), a measure on top of inspect_evals'
  accuracy, which count the answer letter its scorer read (`bbq_scorer`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import (
    CORRECT,
    Metric,
    Score,
    Scorer,
    Target,
    accuracy,
    choice,
    grouped,
    match,
    mean,
    scorer,
    stderr,
)
from inspect_ai.scorer import f1 as f1_scorer
from inspect_ai.solver import (
    Generate,
    Solver,
    TaskState,
    chain,
    generate,
    multiple_choice,
    prompt_template,
    solver,
)
from inspect_evals.aime2026.aime2026 import record_to_sample as aime_sample
from inspect_evals.arc.arc import record_to_sample as arc_sample
from inspect_evals.bbq.bbq import record_to_sample as bbq_sample
from inspect_evals.drop.drop import _sample_is_not_known_duplicate as drop_known_good
from inspect_evals.drop.drop import drop_solver, extract_answer
from inspect_evals.drop.drop import record_to_sample as drop_sample
from inspect_evals.gpqa.gpqa import DEFAULT_SHUFFLE_SEED as GPQA_SHUFFLE_SEED
from inspect_evals.gpqa.gpqa import record_to_sample as gpqa_sample
from inspect_evals.gsm8k.gsm8k import MATH_PROMPT_TEMPLATE as GSM8K_TEMPLATE
from inspect_evals.gsm8k.gsm8k import record_to_sample as gsm8k_sample
from inspect_evals.mgsm.mgsm import LANG_TO_INSTRUCTIONS as MGSM_INSTRUCTIONS
from inspect_evals.mmlu.mmlu import mmlu_multiple_choice, record_to_sample_mmlu
from inspect_evals.mmlu_pro.mmlu_pro import mmlu_pro_solver
from inspect_evals.mmlu_pro.mmlu_pro import record_to_sample as mmlu_pro_sample
from inspect_evals.truthfulqa.truthfulqa import DEFAULT_SHUFFLE_SEED as TRUTHFULQA_SEED
from inspect_evals.truthfulqa.truthfulqa import labels_to_positions
from inspect_evals.utils import create_stable_id, filter_duplicate_ids
from inspect_evals.utils.aime_common import aime_scorer, aime_solver
from inspect_evals.winogrande.winogrande import record_to_sample as winogrande_sample
from inspect_evals.winogrande.winogrande import winogrande_solver

from evalsuite import bbh

Record = dict[str, Any]

# inspect_evals' own counts and reasons (`mmlu.get_mmlu_dataset`): the most rows the real
# all/test split drops under its ids; more would mean the ids no longer identify a question.
MMLU_MAX_DUPLICATES = 105
MMLU_DUPLICATES_REASON = (
    "78 test questions appear under two subjects and 27 are exact repeats, see "
    "https://huggingface.co/datasets/cais/mmlu/discussions/35"
)


def _mmlu(rows: list[Record]) -> list[Sample]:
    samples = [record_to_sample_mmlu(row) for row in rows]
    return _deduplicated(samples, MMLU_MAX_DUPLICATES, MMLU_DUPLICATES_REASON)


def _deduplicated(samples: list[Sample], max_duplicates: int, reason: str) -> list[Sample]:
    kept = filter_duplicate_ids(
        MemoryDataset(samples), max_duplicates=max_duplicates, reason=reason
    )
    return list(kept)


def _truthfulqa(rows: list[Record]) -> list[Sample]:
    """MC1, as inspect_evals' `truthfulqa(target="mc1")` builds it: the rows in the order
    `datasets` shuffles them with seed 42, then the choices shuffled with seed 42 (the hub
    lists the true answer first)."""
    import datasets

    samples = [
        Sample(
            id=create_stable_id(row["question"], prefix="truthfulqa"),
            input=row["question"],
            choices=list(row["mc1_targets"]["choices"]),
            target=labels_to_positions(list(row["mc1_targets"]["labels"])),
        )
        for row in rows
    ]
    order = datasets.Dataset.from_dict({"index": list(range(len(samples)))})
    shuffled = [samples[i] for i in order.shuffle(seed=TRUTHFULQA_SEED)["index"]]
    return _choices_shuffled(shuffled, TRUTHFULQA_SEED)


def _choices_shuffled(samples: list[Sample], seed: int) -> list[Sample]:
    dataset = MemoryDataset(samples)
    dataset.shuffle_choices(seed=seed)
    return list(dataset)


def _gpqa(rows: list[Record]) -> list[Sample]:
    # the CSV lists the correct answer first: inspect_evals shuffles with its fixed seed
    return _choices_shuffled([gpqa_sample(row) for row in rows], GPQA_SHUFFLE_SEED)


def _bbq(rows: list[Record]) -> list[Sample]:
    """inspect_evals' samples (ids `<category>_<example_id>`, its `combine_subsets`), with the
    letters the bias scores need (`records.bbq_bias_letters`)."""
    from evalsuite.records import bbq_bias_letters

    samples = []
    for row in rows:
        sample = bbq_sample(row)
        sample.id = f"{row['category']}_{int(row['example_id']):05d}"
        sample.metadata = {
            **(sample.metadata or {}),
            "target_letter": sample.target,
            **bbq_bias_letters(row),
        }
        samples.append(sample)
    return samples


def _mgsm(rows: list[Record]) -> list[Sample]:
    """inspect_evals' `load_mgsm_dataset(use_cot=True)`: the id hashes the question with its
    language, the input is the language's own instruction around it."""
    samples = []
    for row in rows:
        language = str(row["source_file"]).removeprefix("mgsm_").removesuffix(".tsv")
        question = str(row["question"])
        sample_id = create_stable_id(question, prefix=language)
        samples.append(
            Sample(
                id=sample_id,
                input=MGSM_INSTRUCTIONS[language].format(prompt=question),
                target=str(row["answer"]),
                # the question alone too, for the item (`records.sample_item`)
                metadata={"language": language, "question_id": sample_id, "question": question},
            )
        )
    return samples


def _drop(rows: list[Record]) -> list[Sample]:
    # one query id is in the validation split twice, once with its question mistyped
    return [sample for sample in map(drop_sample, rows) if drop_known_good(sample)]


def _each(record_to_sample: Callable[[Record], Sample]) -> Callable[[list[Record]], list[Sample]]:
    return lambda rows: [record_to_sample(row) for row in rows]


# The benchmarks that inspect_evals implements and this module builds: every row of the pinned
# split (`hub.records`) to inspect samples, as its task's dataset loader makes them.
SAMPLES: dict[str, Callable[[list[Record]], list[Sample]]] = {
    "gsm8k": _each(gsm8k_sample),
    "mmlu": _mmlu,
    "arc-challenge": _each(arc_sample),
    "winogrande": _each(winogrande_sample),
    "truthfulqa": _truthfulqa,
    "mmlu-pro": _each(mmlu_pro_sample),
    "aime": _each(aime_sample),
    "bbq": _bbq,
    "gpqa": _gpqa,
    "mgsm": _mgsm,
    "drop": _drop,
}


def _with_verdict(result: Score | None) -> Score | None:
    """The score with its verdict and the answer its scorer read in the metadata, so the
    aggregates computed after the run (`benchmark_metrics`: BBQ's bias scores, BBH's accuracy
    per answer kind) count what the scorer counted."""
    if result is None:
        return None
    noted = {"correct": result.value == CORRECT, "answer": result.answer or ""}
    return result.model_copy(update={"metadata": {**(result.metadata or {}), **noted}})


@scorer(metrics=[accuracy(), stderr()])
def bbq_scorer() -> Scorer:
    """inspect_evals' BBQ scorer (`choice()`), noting the letter it read."""
    inner = choice()

    async def score(state: TaskState, target: Target) -> Score | None:
        return _with_verdict(await inner(state, target))

    return score


@scorer(metrics=[grouped(accuracy(), "dataset_name"), stderr()])
def bbh_scorer() -> Scorer:
    """inspect_evals' BBH scorer (by answer kind), noting its verdict."""
    inner = bbh.scorer()

    async def score(state: TaskState, target: Target) -> Score | None:
        return _with_verdict(await inner(state, target))

    return score


# inspect_ai's `multiple_choice()` reads the letter with `^ANSWER\s*:\s*([A-Za-z\d ,]+)\s*
# (?:$|\n|\.)`, where a run of spaces can be split three ways: "ANSWER:", 2,000 spaces and a
# "!" take it half a minute, 8,000 half an hour, in one regex call that blocks the event loop
# (no time limit interrupts it), so a trained model could stall a whole evaluation. A run of
# spaces and tabs reads as one space to every pattern the scorers here use, so the completion
# the solver and scorer read has each run cut to one space (the message keeps its text).
_SPACE_RUN = re.compile(r"[ \t]{2,}")


@solver
def spaces_bounded(inner: Solver | list[Solver]) -> Solver:
    """The inner solver, reading each completion with its runs of spaces cut to one."""
    solve_inner = chain(*inner) if isinstance(inner, list) else inner

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        async def generate_bounded(state: TaskState, *args: Any, **kwargs: Any) -> TaskState:
            state = await generate(state, *args, **kwargs)
            state.output.completion = _SPACE_RUN.sub(" ", state.output.completion)
            return state

        return await solve_inner(state, generate_bounded)  # type: ignore[arg-type]

    return solve


def solver_for(name: str) -> Solver:
    return spaces_bounded(SOLVERS[name]())


# Each benchmark's solver, scorer and (where its task sets them) metrics, as its task has
# them. Only the options that would read a split the arena does not pin differ (`fewshot=0`).
SOLVERS: dict[str, Callable[[], Solver | list[Solver]]] = {
    "gsm8k": lambda: [prompt_template(GSM8K_TEMPLATE), generate()],
    "mmlu": lambda: mmlu_multiple_choice(cot=False, max_non_cot_tokens=16),
    "arc-challenge": multiple_choice,
    "winogrande": lambda: winogrande_solver("winogrande_xl", fewshot=0, fewshot_seed=0),
    "truthfulqa": lambda: multiple_choice(multiple_correct=False),
    "mmlu-pro": lambda: mmlu_pro_solver(fewshot=0),
    "aime": aime_solver,
    "bbq": multiple_choice,
    "gpqa": lambda: multiple_choice(cot=True),
    "mgsm": generate,
    "drop": lambda: drop_solver(fewshot=0, fewshot_seed=0),
    "bbh": bbh.solver,
}


def _match_numeric() -> Scorer:
    return match(numeric=True)


SCORERS: dict[str, Callable[[], Scorer]] = {
    "gsm8k": _match_numeric,
    "mmlu": choice,
    "arc-challenge": choice,
    "winogrande": choice,
    "truthfulqa": choice,
    "mmlu-pro": choice,
    "aime": aime_scorer,
    "bbq": bbq_scorer,
    "gpqa": choice,
    "mgsm": _match_numeric,
    "drop": lambda: f1_scorer(extract_answer),
    "bbh": bbh_scorer,
}


def metrics(name: str) -> list[Metric | dict[str, list[Metric]]] | None:
    """The task-level metrics inspect_evals sets for the benchmark (None: its scorer's)."""
    if name == "mgsm":
        return [accuracy(), stderr(cluster="question_id")]
    if name == "drop":
        return [mean(), stderr(cluster="passage_hash")]
    return None


def samples(name: str, rows: Iterable[Record]) -> list[Sample]:
    return SAMPLES[name](list(rows))
