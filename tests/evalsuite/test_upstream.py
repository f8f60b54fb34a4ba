"""The benchmarks inspect_evals implements, against inspect_evals' own tasks.

Parity: each benchmark's task as the arena builds it (`tasks.benchmark_task`, rows read offline
from the hub cache) and inspect_evals' own task function (its `hf_dataset` and downloads
pointed at the same rows, since nothing here reaches the network) run on the same fixed,
hard-to-score model outputs; both give the same sample ids, the same per-item verdicts and the
same metric. The fixtures carry the real sets' pathologies (MMLU's repeated questions, DROP's
repeated query id, non-ASCII text, empty and very long fields).
"""

from __future__ import annotations

import importlib
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, csv_dataset
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from evalsuite import hub, registry, tasks, upstream
from evalsuite.registry import benchmark, benchmark_samples

Output = Callable[[str], str]  # the target's first answer -> the model's reply

CHOICE_OUTPUTS: list[Output] = [
    lambda t: f"ANSWER: {t}",
    lambda t: f"Let me think.\nANSWER: ({t})",
    lambda t: f"answer: {t.lower()}",
    lambda t: f"The answer is {t}.",  # no "ANSWER:" line
    lambda t: f"ANSWER: {t}, A",  # two letters
    lambda t: "ANSWER: Because",  # almost a letter
    lambda t: "ANSWER: Б",  # a Cyrillic letter that looks like B
    lambda t: "",
    lambda t: "ANSWER: A",
    lambda t: "ANSWER: B",
]
NUMBER_OUTPUTS: list[Output] = [
    lambda t: f"ANSWER: {t}",
    lambda t: f"Reasoning...\nANSWER: -{t}",  # the sign
    lambda t: f"ANSWER: {t}.0",
    lambda t: f"ANSWER: ${t}",
    lambda t: f"The total is {t} dollars.",
    lambda t: f"Answer: {t}",
    lambda t: f"答案: {t}",
    lambda t: f"ANSWER: \\boxed{{{t}}}",
    lambda t: "ANSWER: \\frac{1}{2}",
    lambda t: f"ANSWER: {t}\nWait, no.\nANSWER: 7",
]
AIME_OUTPUTS: list[Output] = [
    lambda t: f"ANSWER: {t}",
    lambda t: f"$$\n\\boxed{{{t}}}\n$$",
    lambda t: f"ANSWER: 0{t}",
    lambda t: f"So it is {t}.\nANSWER: -{t}",
    lambda t: "",
]
DROP_OUTPUTS: list[Output] = [
    lambda t: f"Answer: {t}",
    lambda t: f"Thinking step by step.\nanswer: {t.upper()}",
    lambda t: f"{t}",  # no answer line
    lambda t: "Answer: six",
    lambda t: "Answer: Müller, São Paulo",
    lambda t: f"Answer: {t} and more words",
]
BBH_OUTPUTS: list[Output] = [
    lambda t: f"ANSWER: {t}",
    lambda t: f"So the answer is {t}.",
    lambda t: f"ANSWER: ({t})",
    lambda t: f"ANSWER: {t.lower()}.",
    lambda t: f"Let's think.\nANSWER: {t} ]",
    lambda t: "ANSWER: ) ] }",
    lambda t: "ANSWER: True",
]

OUTPUTS: dict[str, list[Output]] = {
    "gsm8k": NUMBER_OUTPUTS,
    "mmlu": CHOICE_OUTPUTS,
    "arc-challenge": CHOICE_OUTPUTS,
    "winogrande": CHOICE_OUTPUTS,
    "truthfulqa": CHOICE_OUTPUTS,
    "mmlu-pro": CHOICE_OUTPUTS,
    "aime": AIME_OUTPUTS,
    "bbq": CHOICE_OUTPUTS,
    "gpqa": CHOICE_OUTPUTS,
    "mgsm": NUMBER_OUTPUTS,
    "drop": DROP_OUTPUTS,
    "bbh": BBH_OUTPUTS,
}


def _rows(name: str) -> dict[str, list[dict]]:
    """The benchmark's fixture rows, by config (BBH) or all under "" (the others)."""
    entry = benchmark(name)
    if name == "bbh":
        return {
            path.split("/", 1)[0]: rows
            for path, rows in hub.records_by_file(name, entry.hub).items()
        }
    return {
        "": [
            {k: v for k, v in row.items() if k != "source_file"}
            for row in hub.records(name, entry.hub)
        ]
    }


@pytest.fixture
def offline_inspect_evals(monkeypatch, tmp_path):
    """Point inspect_evals' own loaders at the fixture rows: `datasets.load_dataset` (under
    its `hf_dataset`), GPQA's and MGSM's downloads, BBQ's script loader."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def use(name: str) -> None:
        by_config = _rows(name)

        def load_dataset(*args, name=None, split=None, **kwargs):
            rows = by_config.get(name or "", by_config.get(""))
            return datasets.Dataset.from_list(rows)

        monkeypatch.setattr(datasets, "load_dataset", load_dataset)
        entry = benchmark(name)
        if name == "gpqa":
            gpqa = importlib.import_module("inspect_evals.gpqa.gpqa")
            monkeypatch.setattr(gpqa, "download", lambda *args, **kwargs: None)
            monkeypatch.setattr(gpqa, "load_csv_dataset", _csv_dataset)
            monkeypatch.setattr(gpqa, "GPQA_DIAMOND_CACHE_PATH", hub.require(name, entry.hub)[0])
        if name == "mgsm":
            mgsm = importlib.import_module("inspect_evals.mgsm.mgsm")
            folder = tmp_path / "mgsm"
            folder.mkdir()
            for path in hub.require(name, entry.hub):
                shutil.copy(path, folder / path.name)
            monkeypatch.setattr(mgsm, "download", lambda *args, **kwargs: None)
            monkeypatch.setattr(mgsm, "load_csv_dataset", _csv_dataset)
            monkeypatch.setattr(mgsm, "MGSM_CACHE_DIR", folder)
        if name == "bbq":
            bbq = importlib.import_module("inspect_evals.bbq.bbq")

            def by_subset(*, record_to_sample, subset, **kwargs):
                rows = [r for r in by_config[""] if r["category"] == subset]
                return MemoryDataset([record_to_sample(r) for r in rows])

            monkeypatch.setattr(bbq, "load_hf_dataset_with_script", by_subset)
        if name == "bbh":
            # the fixtures hold a few rows a subset, not the two broken ruin_names rows
            # inspect_evals insists on finding (`bbh._present` skips them too)
            bbh = importlib.import_module("inspect_evals.bbh.bbh")
            monkeypatch.setattr(bbh, "KNOWN_BROKEN_SAMPLES", {})

    return use


def _csv_dataset(*, file_path, eval_name=None, cache_tag=None, **kwargs):
    return csv_dataset(file_path, **kwargs)


def _inspect_evals_task(name: str) -> Task:
    """inspect_evals' own task for the benchmark, with the options the arena uses."""
    if name == "gsm8k":
        from inspect_evals.gsm8k.gsm8k import gsm8k

        return gsm8k(fewshot=0)
    if name == "mmlu":
        from inspect_evals.mmlu.mmlu import mmlu_0_shot

        return mmlu_0_shot(shuffle=False)
    if name == "arc-challenge":
        from inspect_evals.arc.arc import arc_challenge

        return arc_challenge()
    if name == "winogrande":
        from inspect_evals.winogrande.winogrande import winogrande

        return winogrande(fewshot=0)
    if name == "truthfulqa":
        from inspect_evals.truthfulqa.truthfulqa import truthfulqa

        return truthfulqa()
    if name == "mmlu-pro":
        from inspect_evals.mmlu_pro.mmlu_pro import mmlu_pro

        return mmlu_pro(shuffle=False)
    if name == "aime":
        from inspect_evals.aime2026.aime2026 import aime2026

        return aime2026()
    if name == "bbq":
        from inspect_evals.bbq.bbq import bbq

        return bbq()
    if name == "gpqa":
        from inspect_evals.gpqa.gpqa import gpqa_diamond

        return gpqa_diamond()
    if name == "mgsm":
        from inspect_evals.mgsm.mgsm import mgsm

        return mgsm()
    if name == "drop":
        from inspect_evals.drop.drop import drop

        return drop(fewshot=0)
    if name == "bbh":
        from inspect_evals.bbh.bbh import bbh

        return bbh(prompt_type="chain_of_thought")
    raise KeyError(name)


def _scripted_model(name: str):
    """A model that answers each sample (found by its input in the prompt) with one of the
    benchmark's fixed outputs, in turn over the samples in id order."""
    ordered = sorted(benchmark_samples(name), key=lambda s: str(s.id))
    replies = {}
    for index, sample in enumerate(ordered):
        target = sample.target if isinstance(sample.target, str) else sample.target[0]
        outputs = OUTPUTS[name]
        replies[str(sample.input)] = outputs[index % len(outputs)](target)

    def reply(messages, *args):
        asked = "\n".join(message.text for message in messages)
        keys = [key for key in replies if key in asked]
        assert keys, f"{name}: a prompt names no known sample: {asked[:300]!r}"
        output = ModelOutput.from_content("mockllm/model", replies[max(keys, key=len)])
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # no tokenizer
        return output

    return get_model("mockllm/model", custom_outputs=reply)


def _verdicts(task: Task, model, log_dir: Path) -> tuple[dict[str, object], dict[str, float]]:
    [log] = eval(
        task, model=model, log_dir=str(log_dir), display="none", epochs=1, log_level="warning"
    )
    assert log.status == "success", log.error
    verdicts = {str(sample.id): next(iter(sample.scores.values())).value for sample in log.samples}
    metrics = {
        metric: value.value  # one scorer a task; its name may differ (a wrapper)
        for score in log.results.scores
        for metric, value in score.metrics.items()
    }
    return verdicts, metrics


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_the_arenas_task_scores_as_inspect_evals_own_task_on_the_same_outputs(
    name, offline_inspect_evals, tmp_path
):
    offline_inspect_evals(name)
    model = _scripted_model(name)
    ours, our_metrics = _verdicts(tasks.benchmark_task(benchmark(name)), model, tmp_path / "a")
    theirs, their_metrics = _verdicts(_inspect_evals_task(name), model, tmp_path / "b")
    assert ours == theirs
    assert our_metrics == their_metrics
    values = {str(value) for value in ours.values()}
    assert len(values) > 1, f"{name}: the outputs should score both ways, got {values}"


def test_mmlu_and_drop_load_with_the_repeats_of_the_real_sets_dropped():
    mmlu_rows = _rows("mmlu")[""]
    by_question = Counter((row["question"], tuple(row["choices"])) for row in mmlu_rows)
    assert max(by_question.values()) == 3  # one question under two subjects, and repeated
    mmlu = benchmark_samples("mmlu")
    assert len(mmlu) == len(by_question)
    assert len({s.id for s in mmlu}) == len(mmlu)

    drop_rows = _rows("drop")[""]
    repeated = "28553293-d719-441b-8f00-ce3dc6df5398"
    assert [r["query_id"] for r in drop_rows].count(repeated) == 2
    [kept] = [s for s in benchmark_samples("drop") if s.id == repeated]
    assert str(kept.input).endswith("?\nAnswer:")  # the one with its question mark


def test_more_mmlu_repeats_than_the_real_set_has_is_an_error(monkeypatch):
    from inspect_evals.utils.deps_utils import DuplicateIdError

    row = _rows("mmlu")[""][0]
    monkeypatch.setattr(upstream, "MMLU_MAX_DUPLICATES", 2)
    with pytest.raises(DuplicateIdError):
        upstream.samples("mmlu", [row] * 4)


def test_every_benchmarks_sample_ids_are_unique_after_loading():
    judge = get_model("mockllm/model")
    for entry in registry.benchmarks():
        ids = [sample.id for sample in tasks.benchmark_task(entry, judge=judge).dataset]
        repeated = [key for key, count in Counter(ids).items() if count > 1]
        assert ids and not repeated, f"{entry.name}: repeated ids {repeated}"


def test_non_ascii_empty_and_long_fields_reach_the_items_unchanged():
    items = registry.benchmark_items("mmlu")
    assert any("π" in item.input and "“" in item.input for item in items)
    long_item = max(items, key=lambda item: len(item.input))
    assert len(long_item.input) > 4000 and "" in long_item.choices
    drop = registry.benchmark_items("drop")
    assert any("São Paulo" in item.input for item in drop)


def test_a_reply_padded_with_spaces_is_read_in_linear_time(tmp_path):
    """inspect_ai's letter pattern takes cubic time on "ANSWER:", a run of spaces and another
    character (3,000 spaces: a minute and a half in one blocking regex call, which a trained
    model could repeat on every item). The completion the solver reads has its runs of spaces
    cut to one, so this reply is read at once, and its letter still counts."""
    padded = "ANSWER:" + " " * 3000 + "!\nANSWER:" + " " * 3000 + "B"

    def reply(messages, *args):
        output = ModelOutput.from_content("mockllm/model", padded)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    model = get_model("mockllm/model", custom_outputs=reply)
    task = tasks.benchmark_task(benchmark("mmlu"))
    [log] = eval(task, model=model, log_dir=str(tmp_path), display="none", limit=1)
    [sample] = log.samples
    assert next(iter(sample.scores.values())).answer == "B"
    assert sample.output.completion.startswith("ANSWER: !")  # what was read
    assert sample.messages[-1].text == padded  # what the model said, as it said it
