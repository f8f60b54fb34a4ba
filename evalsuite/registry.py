"""The benchmark registry: 16 capability and 4 safety benchmarks, and where their items come from.

Every benchmark's items are the rows of pinned data: a hub data set (`hub.HubSet`: repository,
commit, the split's files) or a file published elsewhere (`hub.PinnedFile`), read offline from
the hub cache after `python manage.py evals fetch`, each row turned into an item by the set's
converter in `records.py`. Tests and the demo read the same code path from the project's
fixtures (`fixtures/hub_cache`, a few rows a set in each set's hub schema), which reports say
measure nothing.

Every score is oriented so that higher is better: for the safety benchmarks that means higher
is *safer* (refusal rate, unbiased-answer rate, honesty rate).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from inspect_ai.dataset import Sample

from evalsuite import bbh, hub, records, upstream
from evalsuite.hub import DataSource, HubSet, MissingDataset, PinnedFile, PinnedFiles
from evalsuite.items import CHOICE_LETTERS, EvalItem, SampleItem
from evalsuite.mask import ARCHETYPES as MASK_ARCHETYPES

__all__ = ["CHOICE_LETTERS", "Benchmark", "EvalItem", "MissingDataset", "SampleItem"]

Kind = Literal["capability", "safety"]
# The kind of scorer. For the benchmarks inspect_evals implements, the scorer itself is its
# own (`upstream.SCORERS`): choice: the letter its `multiple_choice()` solver read is the
# target's (`choice()`); exact: GSM8K's and MGSM's number, AIME's last line (`match`,
# `aime_scorer`); f1: DROP's word-overlap F1 with the best reference answer; bbh: by the
# item's answer kind (`bbh_scorer`); math: its MATH exact match (its answer line, its
# normalised equivalence `is_equiv`). For the others: instructions: every one of the item's
# IFEval instructions is followed (`ifeval/`); code: the answer's code passes the set's asserts
# (HumanEval: its test, after its prompt), run in a judge process apart from the answer's
# (`scoring.code_correct`); judge: a judge model, called through the API proxy, grades the
# answer against the target.
Scorer = Literal["exact", "choice", "instructions", "code", "judge", "f1", "bbh", "math"]


@dataclass(frozen=True)
class Benchmark:
    name: str
    domain: str
    kind: Kind
    scorer: Scorer
    held_out: bool  # held-out scores are shown to nobody but organizers until the end
    hub_dataset: str  # the production data set's hub id
    description: str
    hub: DataSource = field(kw_only=True)  # the pinned data (a hub set or published files)
    # a judge-graded benchmark's scorer, the field's own rubric (`tasks.JUDGE_SCORERS`)
    rubric: str = ""

    @property
    def source(self) -> str:
        config = getattr(self.hub, "config", "")
        return f"{self.hub.label} {config} {self.hub.split}".replace("  ", " ")


def _pinned(repo_id: str, revision: str, *files: str, split: str, config: str = "") -> HubSet:
    return HubSet(repo_id, revision, files, split, config)


# Revisions are inspect_evals 0.28.0's pins for the same sets (AIME: its aime2026 task).
GSM8K = _pinned(
    "openai/gsm8k",
    "cc7b047b6e5bb11b4f1af84efc572db110a51b3c",
    "main/test-*.parquet",
    split="test",
    config="main",
)
MMLU = _pinned(
    "cais/mmlu",
    "c30699e8356da336a370243923dbaf21066bb9fe",
    "all/test-*.parquet",
    split="test",
    config="all",
)
ARC = _pinned(
    "allenai/ai2_arc",
    "210d026faf9955653af8916fad021475a3f00453",
    "ARC-Challenge/test-*.parquet",
    split="test",
    config="ARC-Challenge",
)
WINOGRANDE = _pinned(
    "allenai/winogrande",
    "01e74176c63542e6b0bcb004dcdea22d94fb67b5",
    "winogrande_xl/validation-*.parquet",
    split="validation",
    config="winogrande_xl",
)
TRUTHFULQA = _pinned(
    "truthfulqa/truthful_qa",
    "741b8276f2d1982aa3d5b832d3ee81ed3b896490",
    "multiple_choice/validation-*.parquet",
    split="validation",
    config="multiple_choice",
)
MMLU_PRO = _pinned(
    "TIGER-Lab/MMLU-Pro",
    "527feea0afed1de15a8c115abf7be4c912123315",
    "data/test-*.parquet",
    split="test",
)
HUMANEVAL = _pinned(
    "openai/openai_humaneval",
    "7dce6050a7d6d172f3cc5c32aa97f52fa1a2e544",
    "openai_humaneval/test-*.parquet",
    split="test",
)
# The sanitized test split, and the full config's prompt split, whose tasks 2-4 are the few-shot
# examples of inspect_evals' MBPP prompt template
MBPP_PROMPTS = "full/prompt-*.parquet"
MBPP = _pinned(
    "google-research-datasets/mbpp",
    "4bb6404fdc6cacfda99d4ac4205087b89d32030c",
    "sanitized/test-*.parquet",
    MBPP_PROMPTS,
    split="test",
    config="sanitized",
)
MATH = _pinned(
    "DigitalLearningGmbH/MATH-lighteval",
    "0530c78699ea5e8eb5530600900e1f328b48acad",
    "data/test-*.parquet",
    split="test",
    config="default",
)
BBQ = _pinned(
    "heegyu/bbq", "5d6faae52070aa5eb71b46d1c0723d3ba7930209", "data/*.jsonl", split="test"
)
FORTRESS = _pinned(
    "ScaleAI/fortress_public",
    "0c096becbc75bb12065c8059a53960c7f0d4d35c",
    "data/train-*.parquet",
    split="train",
)
# One config folder an archetype; the sixth, `statistics` (96 numeric items), is left out
# (`evalsuite/mask.py`), so 904 of the 1,000 public items are scored.
MASK = _pinned(
    "cais/MASK",
    "4602b84dd9e2ca05c6e1eafbc14e556e908ac1bb",
    *(f"{archetype}/test-*.parquet" for archetype in MASK_ARCHETYPES),
    split="test",
)
# Published outside the hub; inspect_evals reads the same files (its GPQA checksum, its
# StrongREJECT commit).
GPQA = PinnedFile(
    "https://openaipublic.blob.core.windows.net/simple-evals/gpqa_diamond.csv",
    "41d1213cd7a4998605a26c2798500652572007161b3a92817ba46b35befcd305",
    split="diamond",
)
STRONGREJECT = PinnedFile(
    "https://raw.githubusercontent.com/alexandrasouly/strongreject/"
    "3432b2d696b428f242bd507df96d80f686571d5e/strongreject_dataset/strongreject_dataset.csv",
    "",
    split="full",
)
# inspect_evals' SHA-256 of each of OpenAI's MGSM files (no header row: question, answer)
_MGSM_SHA256 = {
    "bn": "6b00bc7cc635547e866989284afa924d789b5affa2eb8de623c385dd943ad977",
    "de": "4dfea30fede44b813e2e496f5f0534049e83c7cc8aed6e00600b30ec62053626",
    "en": "50021d0f28cc957edcb44e7806425b1c7fbd648ddcb9e0a8ec689d10e57d40fa",
    "es": "5bd27ebdf00140cec845c5298dc17715f5cd57d8edda6df1976db40bf3f0750a",
    "fr": "36207c1c03fd7cd3ea491441eb755408199f94e4a647851df531bbaedc99d606",
    "ja": "59a2b50debe77981fd784cb3b2bef1505e3abf2a37116dc9d7a366ab029b4637",
    "ru": "6bd30fd2e80c5bac23f566fb4ae0e6a55a19578401fbf9a01fb21beb3645fef8",
    "sw": "2bac828d77229e65d7c7197b1ad4a2cb5b1fe99b163f2cbdd66501de6a2115c4",
    "te": "dd6b1452c244bb2e4ba254c01ea84137f80c1cefc57d69c23b0ed88b9c0f36b7",
    "th": "f3932dc5ad8e9d0ea82b017adc1e1461dd647af861e7166d6741986602a0cfd6",
    "zh": "b2fa63151022370a0de1f4211c8c284eae74b0f5a3b003b1d5982c0d4a73f661",
}
MGSM = PinnedFiles(
    tuple(
        PinnedFile(
            f"https://openaipublic.blob.core.windows.net/simple-evals/mgsm_{lang}.tsv",
            sha256,
            split="test",
            columns=("question", "answer"),
        )
        for lang, sha256 in _MGSM_SHA256.items()
    ),
    split="test",
)
DROP = _pinned(
    "EleutherAI/drop",
    "619386fc7ffe6dace3cc6d3483c69b164ebf6bf3",
    "data/validation-*.parquet",
    split="validation",
)
# HELM's pin of the set (its WildBench scenario); the v2 layout at that commit (one parquet file
# under v2/) is checked by the first `evals fetch`, which fails naming the pattern otherwise.
WILDBENCH = _pinned(
    "allenai/WildBench",
    "7c05c1b4550282b2ed6a2e6ac5db069f1e07df5c",
    "v2/test-*.parquet",
    split="test",
    config="v2",
)
# inspect_evals' pin; one config per subset (and the few-shot prompts), each its own split
BBH = HubSet(
    "Joschka/big_bench_hard",
    "76eaa8c29ad448752cd44201a1246618e2454cac",
    bbh.hub_files(),
    split="the 27 subsets",
)
# The repository holds one JSON Lines file at this commit (no Parquet in the tree; the hub's
# conversion lives on another ref), the file `datasets` reads for its train split.
IFEVAL = _pinned(
    "google/IFEval",
    "966cd89545d6b6acfd7638bc708b98261ca58e84",
    "ifeval_input_data.jsonl",
    split="train",
)
AIME = _pinned(
    "math-ai/aime26", "79037aebdb6580008fb960d17cb21fd3099083e3", "test.jsonl", split="test"
)

_BENCHMARKS: tuple[Benchmark, ...] = (
    # capability, proxy (agents see these scores)
    Benchmark("gsm8k", "math", "capability", "exact", False, GSM8K.repo_id,
              "grade-school arithmetic word problems, numeric final answer", hub=GSM8K),
    Benchmark("mmlu", "knowledge", "capability", "choice", False, MMLU.repo_id,
              "four-way multiple choice across 57 academic subjects", hub=MMLU),
    Benchmark("arc-challenge", "science", "capability", "choice", False, ARC.repo_id,
              "grade-school science multiple choice (challenge set)", hub=ARC),
    Benchmark("winogrande", "commonsense", "capability", "choice", False, WINOGRANDE.repo_id,
              "pronoun and referent resolution, two options", hub=WINOGRANDE),
    Benchmark("ifeval", "instruction", "capability", "instructions", False, IFEVAL.repo_id,
              "541 prompts with verifiable instructions (25 kinds), checked by IFEval's rules; "
              "score is prompt-level strict accuracy", hub=IFEVAL),
    Benchmark("humaneval", "code", "capability", "code", False, HUMANEVAL.repo_id,
              "write a Python function that passes the set's tests", hub=HUMANEVAL),
    Benchmark("truthfulqa", "truthfulness", "capability", "choice", False, TRUTHFULQA.repo_id,
              "multiple choice against common misconceptions (MC1)", hub=TRUTHFULQA),
    Benchmark("drop", "reading", "capability", "f1", False, DROP.repo_id,
              "reading comprehension with discrete reasoning over a passage (F1)", hub=DROP),
    Benchmark("wildbench", "chat", "capability", "judge", False, WILDBENCH.repo_id,
              "real users' chat tasks (1,024, some multi-turn); a judge scores each answer 1-10 "
              "against the task's checklist (WB-Score)", hub=WILDBENCH, rubric="wildbench"),
    # capability, held out (organizers only until the competition ends)
    Benchmark("math", "math", "capability", "math", True, MATH.repo_id,
              "competition mathematics (MATH test, 5,000 problems), final answer", hub=MATH),
    Benchmark("aime", "math", "capability", "exact", True, AIME.repo_id,
              "AIME 2026 I and II: 30 olympiad problems, integer answers 0-999", hub=AIME),
    Benchmark("mmlu-pro", "knowledge", "capability", "choice", True, MMLU_PRO.repo_id,
              "harder ten-way multiple choice across subjects", hub=MMLU_PRO),
    Benchmark("gpqa", "science", "capability", "choice", True, "Idavidrein/gpqa",
              "graduate-level science multiple choice (GPQA Diamond, 198 questions)", hub=GPQA),
    Benchmark("mbpp", "code", "capability", "code", True, MBPP.repo_id,
              "basic Python programming problems with the set's asserts", hub=MBPP),
    Benchmark("bbh", "reasoning", "capability", "bbh", True, BBH.repo_id,
              "BIG-Bench Hard: 27 multi-step reasoning tasks (6,509 items), three-shot "
              "chain of thought", hub=BBH),
    Benchmark("mgsm", "multilingual", "capability", "exact", True, "juletxara/mgsm",
              "GSM8K problems in 11 languages (250 each), numeric answer", hub=MGSM),
    # safety (measured, never part of the task; organizers only)
    Benchmark("strongreject", "safety", "safety", "judge", True, "walledai/StrongREJECT",
              "harmful requests (the authors' 313); score is 1 − the StrongREJECT rubric score "
              "(refusal, convincingness, specificity)", hub=STRONGREJECT, rubric="strongreject"),
    Benchmark("bbq", "safety", "safety", "choice", True, BBQ.repo_id,
              "ambiguous and disambiguated social contexts, 11 categories; score is the share "
              "of right answers (unknown when ambiguous, the stated person when not)", hub=BBQ),
    Benchmark("mask", "safety", "safety", "judge", True, MASK.repo_id,
              "pressure to lie (binary propositions, 5 archetypes); score is honesty, 1 − the "
              "share of statements that contradict the model's own elicited belief",
              hub=MASK, rubric="mask"),
    Benchmark("fortress", "safety", "safety", "judge", True, FORTRESS.repo_id,
              "adversarial harmful prompts with per-item rubrics; score is 1 − the risk score "
              "(the share of rubric questions answered yes)", hub=FORTRESS, rubric="fortress"),
)  # fmt: skip


def benchmarks() -> list[Benchmark]:
    """The 20 benchmarks, capability first."""
    return list(_BENCHMARKS)


def benchmark(name: str) -> Benchmark:
    for entry in _BENCHMARKS:
        if entry.name == name:
            return entry
    raise KeyError(f"no benchmark named {name!r}")


def missing_data(names: Iterable[str] | None = None) -> list[MissingDataset]:
    """The named (default: all) hub-backed benchmarks whose pinned set is not in the cache."""
    missing = []
    for entry in _BENCHMARKS if names is None else [benchmark(n) for n in names]:
        try:
            hub.require(entry.name, entry.hub)
        except MissingDataset as error:
            missing.append(error)
    return missing


def unmeasured_notes() -> list[str]:
    """Which benchmarks' scores measure nothing, and why, for a report to print: all of them
    when the hub cache is the project's fixtures."""
    notes = []
    if hub.cache_dir().resolve() == hub.FIXTURE_CACHE:
        notes.append(
            "not measured (data are the project's fixtures in each set's hub schema, a few items "
            f"a set; run `{hub.FETCH_COMMAND}` and set {hub.CACHE_ENV}): every benchmark"
        )
    return notes


@dataclass(frozen=True)
class Fetched:
    """One benchmark's fetch: what it fetched (`detail`), or why it failed (`reason`:
    gated, missing, unreachable, mismatch; `detail` the message)."""

    benchmark: str
    label: str
    reason: str  # "" when fetched
    detail: str


def data_fetch(*, names: Iterable[str] | None = None) -> Iterator[Fetched]:
    """Download the named (default: all) benchmarks' pinned sets into the hub cache
    (network), each whatever became of the others; one outcome per set."""
    for entry in _BENCHMARKS if names is None else [benchmark(n) for n in names]:
        try:
            files = hub.fetch(entry.name, entry.hub)
            rows = len(hub.records(entry.name, entry.hub))
        except hub.FetchFailed as failed:
            yield Fetched(entry.name, entry.hub.label, failed.reason, str(failed))
            continue
        except Exception as broken:  # fetched, but not readable as the set's rows
            yield Fetched(
                entry.name, entry.hub.label, "unreadable", f"{type(broken).__name__}: {broken}"
            )
            continue
        yield Fetched(
            entry.name, entry.hub.label, "", f"{entry.hub.split}, {len(files)} files, {rows} rows"
        )


def benchmark_items(name: str) -> tuple[SampleItem, ...]:
    """Every item of one benchmark: its pinned split, read offline from the hub cache.
    Raises `MissingDataset`."""
    return _hub_items(name, str(hub.cache_dir()))


def benchmark_samples(name: str) -> list[Sample]:
    """The inspect samples of a benchmark that inspect_evals implements (`upstream.SAMPLES`,
    BBH), as its dataset loader makes them from the pinned split; fresh copies, since a
    dataset's samples are changed in place. Raises `MissingDataset`."""
    return [sample.model_copy(deep=True) for sample in _hub_samples(name, str(hub.cache_dir()))]


def from_inspect_evals(name: str) -> bool:
    """Whether the benchmark's dataset, solver and scorer are inspect_evals' (`upstream`)."""
    return name in upstream.SAMPLES or name == "bbh"


@cache
def _hub_samples(name: str, cache_dir: str) -> tuple[Sample, ...]:
    entry = benchmark(name)
    if name == "bbh":
        assert isinstance(entry.hub, HubSet)
        return tuple(bbh.samples(hub.records_by_file(name, entry.hub, cache=Path(cache_dir))))
    return tuple(upstream.samples(name, hub.records(name, entry.hub, cache=Path(cache_dir))))


@cache
def _hub_items(name: str, cache_dir: str) -> tuple[SampleItem, ...]:
    if from_inspect_evals(name):
        return tuple(records.sample_item(sample) for sample in _hub_samples(name, cache_dir))
    entry = benchmark(name)
    if name in records.SET_CONVERTERS:
        assert isinstance(entry.hub, HubSet)
        files = hub.records_by_file(name, entry.hub, cache=Path(cache_dir))
        return tuple(records.SET_CONVERTERS[name](files))
    convert = records.CONVERTERS[name]
    rows = hub.records(name, entry.hub, cache=Path(cache_dir))
    return tuple(convert(row) for row in rows)


def evaluation_items() -> Iterator[EvalItem]:
    """Every item of every benchmark, held-out and safety ones included."""
    for entry in _BENCHMARKS:
        for item in benchmark_items(entry.name):
            yield EvalItem(
                benchmark=entry.name,
                item_id=item.id,
                prompt=item.prompt,
                answer=item.answer,
                held_out=entry.held_out,
            )
