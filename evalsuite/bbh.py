"""BIG-Bench Hard (Suzgun et al., 2022, arXiv:2210.09261) as inspect_evals' `bbh` task builds
it, on the mirror it reads (`Joschka/big_bench_hard`): 27 subsets, one config each (its split
named as the config), plus a `few_shot_prompts` config holding each subset's prompts.

Everything but the reading is inspect_evals': its subset registry and answer kinds
(`BBHDatasetRegistry`), its per-kind record converters, its prompts (the three-shot chain of
thought, with its answer-line instruction before the subsets that are not multiple choice),
its question format, its ids (`<subset>_<position>`), the two published rows it drops, its
solver (`multiple_choice()` or `generate()` by kind) and its scorer (`choice()`,
`answer("word")`, `match(location="end")` by kind). inspect_evals loads each config with
`hf_dataset`; here the rows come from the hub cache file by file (`hub.records_by_file`),
since a row does not say which subset it belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import Scorer
from inspect_ai.solver import Solver
from inspect_evals.bbh.bbh import (
    KNOWN_BROKEN_SAMPLES,
    BBHDatasetRegistry,
    BBHPromptManager,
    DatasetType,
    PromptType,
    bbh_scorer,
    bbh_solver,
)
from inspect_evals.utils import drop_known_broken

Record = dict[str, Any]

SUBSETS = tuple(BBHDatasetRegistry.get_all_subset_names())
FEW_SHOT_CONFIG = "few_shot_prompts"
PROMPT_TYPE = PromptType.CHAIN_OF_THOUGHT

# The project reports accuracy per answer kind; inspect_evals scores its Dyck subset as the
# exact-match ones (`match(location="end")`), so it is counted with them.
ANSWER_KINDS = {
    DatasetType.MULTIPLE_CHOICE: "multiple_choice",
    DatasetType.BINARY_CHOICE: "binary",
    DatasetType.EXACT_MATCH: "exact",
    DatasetType.DYCK: "exact",
}


def hub_files() -> tuple[str, ...]:
    """The files to read, in the repository's layout: a folder per config, its split's shards
    named after the split (which is named after the config)."""
    return tuple(f"{name}/{name}-*.parquet" for name in (*SUBSETS, FEW_SHOT_CONFIG))


class _OfflinePrompts(BBHPromptManager):
    """inspect_evals' prompt manager over the few-shot rows already read (its own loads them
    from the hub)."""

    def __init__(self, rows: list[Record]) -> None:
        self.prompts_dataset = rows  # type: ignore[assignment]


def samples(files: Mapping[str, list[Record]]) -> list[Sample]:
    """Every scorable sample of the 27 subsets, in inspect_evals' subset order, from the rows
    of each file (keyed by its path in the repository)."""
    by_config: dict[str, list[Record]] = {}
    for path, rows in sorted(files.items()):
        by_config.setdefault(path.split("/", 1)[0], []).extend(rows)
    prompts = _OfflinePrompts(by_config.get(FEW_SHOT_CONFIG, []))
    converted = []
    for subset in SUBSETS:
        config = BBHDatasetRegistry.get_dataset_config(subset)
        prompt = prompts.get_prompt(subset, PROMPT_TYPE)
        for position, row in enumerate(by_config.get(subset, []), start=1):
            sample = config.sample_converter(row)
            question = str(sample.input)
            # inspect_evals' `bbh` task formats the question so (its inner record_to_sample)
            if config.type == DatasetType.MULTIPLE_CHOICE:
                sample.input = f"{prompt}\n\nQUESTION: {question}\nOPTIONS:"
            else:
                sample.input = f"{prompt}\n\nQUESTION: {question}"
            sample.id = f"{subset}_{position:03d}"
            sample.metadata = {
                **(sample.metadata or {}),
                "answer_kind": ANSWER_KINDS[config.type],
                "question": question,
            }
            converted.append(sample)
    kept = drop_known_broken(
        MemoryDataset(converted),
        broken={key: url for key, url in KNOWN_BROKEN_SAMPLES.items() if _present(key, by_config)},
    )
    return list(kept)


def _present(sample_id: str, by_config: Mapping[str, list[Record]]) -> bool:
    """Whether a known-broken row is in the rows read (the fixtures hold a few a subset;
    inspect_evals' check that every listed row exists holds on the real set)."""
    subset, _, position = sample_id.rpartition("_")
    return len(by_config.get(subset, [])) >= int(position)


def solver() -> Solver:
    return bbh_solver()


def scorer() -> Scorer:
    return bbh_scorer()
