"""BIG-Bench Hard on its hub layout: every subset's config read from the fixture hub cache by
the production loader into inspect_evals' samples, and the accuracy per answer kind reported
next to the headline (its scoring is held to inspect_evals' own task in `test_upstream`)."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arena.serving.client import Endpoint
from evalsuite import bbh
from evalsuite.benchmark_metrics import bbh_metrics
from evalsuite.hub import HubSet, MissingDataset, records_by_file
from evalsuite.items import AnsweredItem
from evalsuite.registry import benchmark, benchmark_items
from evalsuite.runner import run_benchmarks
from tests.support.scripted_llm import Script


def _by_id():
    return {item.id: item for item in benchmark_items("bbh")}


def test_every_subset_is_read_from_its_own_config_with_ids_unique_across_subsets():
    items = benchmark_items("bbh")
    assert {item.metadata["dataset_name"] for item in items} == set(bbh.SUBSETS)
    assert len(bbh.SUBSETS) == 27 and len({item.id for item in items}) == len(items)
    assert [i.id for i in items if i.metadata["dataset_name"] == "boolean_expressions"] == [
        "boolean_expressions_001",
        "boolean_expressions_002",
    ]  # inspect_evals' ids: the same position in two subsets, two ids
    assert benchmark("bbh").scorer == "bbh"


def test_a_multiple_choice_row_becomes_lettered_options_and_the_target_letter():
    item = _by_id()["geometric_shapes_001"]
    assert item.metadata["answer_kind"] == "multiple_choice" and item.target == "J"
    assert len(item.choices) == 10 and item.answer == "triangle"
    assert item.prompt.startswith("This SVG path element") and "J) triangle" in item.prompt


def test_binary_and_exact_rows_keep_their_target_text_without_its_stray_space():
    items = _by_id()
    fallacy = items["formal_fallacies_001"]
    assert (fallacy.target, fallacy.metadata["answer_kind"]) == ("valid", "binary")
    assert items["multistep_arithmetic_two_002"].target == "-51"
    # inspect_evals scores Dyck as an exact match on the answer line
    dyck = items["dyck_languages_001"]
    assert dyck.metadata["answer_kind"] == "exact" and dyck.target.startswith("ANSWER: ")
    assert not items["word_sorting_001"].choices


def test_the_few_shot_prompt_goes_before_the_question_but_is_not_part_of_the_item():
    items = _by_id()
    choice, sorting = items["date_understanding_001"], items["word_sorting_001"]
    assert choice.preamble.startswith("Fixture three-shot prompt for date_understanding.")
    assert "three-shot" not in choice.prompt  # what contamination scans compare
    # a subset without options is told the answer's form first, as inspect_evals does
    assert sorting.preamble.startswith("Make sure you output your answer on the last line as")
    assert "space-separated list of words" in sorting.preamble.split("\n")[0]


def test_accuracy_is_reported_per_answer_kind_from_the_scorers_verdicts():
    def answered(kind, correct):
        return AnsweredItem({"answer_kind": kind}, "", {"correct": correct})

    metrics = bbh_metrics([
        answered("multiple_choice", True),
        answered("multiple_choice", False),
        answered("binary", True),
        answered("binary", True),
        answered("exact", False),
    ])  # fmt: skip
    assert set(metrics) == {"accuracy_multiple_choice", "accuracy_binary", "accuracy_exact"}
    choice = metrics["accuracy_multiple_choice"]
    assert (choice.value, choice.n) == (0.5, 2) and choice.stderr == pytest.approx(0.5)
    assert (metrics["accuracy_binary"].value, metrics["accuracy_binary"].stderr) == (1.0, 0.0)
    assert (metrics["accuracy_exact"].value, metrics["accuracy_exact"].n) == (0.0, 1)


def test_a_run_sends_the_few_shot_prompt_and_reports_accuracy_per_kind(scripted_llm, tmp_path):
    """Through the runner on the fixture: a model that always answers "B" is right on the
    three multiple-choice items whose letter is B, and on nothing else."""
    scripted_llm.scripts["bbh-always-b"] = Script("ANSWER: B", chunk_chars=64, delay_s=0)
    model = Endpoint(base_url=scripted_llm.base_url, model="bbh-always-b")
    (run,) = run_benchmarks(endpoint=model, benchmark_names=["bbh"], log_dir=str(tmp_path))
    assert run.error == "" and run.n == 30 and run.score == pytest.approx(3 / 30)
    choice = run.metrics["accuracy_multiple_choice"]
    assert (choice.value, choice.n) == (pytest.approx(3 / 18), 18)
    assert run.metrics["accuracy_binary"].value == 0.0 and run.metrics["accuracy_exact"].n == 5
    samples = json.loads(Path(run.log_path).read_text())["samples"]
    sent = next(s for s in samples if s["id"] == "navigate_001")["input"]
    assert sent.startswith("Make sure you output your answer on the last line as 'ANSWER: <one")
    assert "Fixture three-shot prompt for navigate." in sent and "QUESTION: If you follow" in sent


def _rows(n):
    return [
        {
            "question": f"q{i}",
            "choices": {"label": ["(A)", "(B)"], "text": ["x", "y"]},
            "target": "B",
        }
        for i in range(n)
    ]


def _prompts():
    return [{"dataset_name": s, "chain_of_thought_prompt": "p"} for s in bbh.SUBSETS]


def test_the_two_published_ruin_names_rows_without_their_answer_are_left_out():
    files = {"ruin_names/ruin_names-00000-of-00001.parquet": _rows(150)}
    files["few_shot_prompts/few_shot_prompts-00000-of-00001.parquet"] = _prompts()
    ids = [sample.id for sample in bbh.samples(files)]
    assert len(ids) == 148 and "ruin_names_100" not in ids and "ruin_names_145" not in ids


def test_evals_fetch_asks_for_every_subset_config_and_the_few_shot_prompts(monkeypatch):
    """The hub is out of reach here: the stand-in records the request and answers with the
    fixture snapshot, as the hub client does once the files are downloaded."""
    import io

    import huggingface_hub
    from django.core.management import call_command

    from evalsuite.hub import FIXTURE_CACHE

    requests = []

    def snapshot_download(repo_id, *, revision, allow_patterns, **kwargs):
        requests.append((repo_id, revision, allow_patterns))
        return str(FIXTURE_CACHE / f"datasets--{repo_id.replace('/', '--')}/snapshots/{revision}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    out = io.StringIO()
    call_command("evals", "fetch", "--benchmark", "bbh", stdout=out)
    repo_id, revision, patterns = requests[0]  # then the offline read that counts the rows
    assert (repo_id, revision) == ("Joschka/big_bench_hard", benchmark("bbh").hub.revision)
    assert len(patterns) == 28 and "few_shot_prompts/few_shot_prompts-*.parquet" in patterns
    assert "word_sorting/word_sorting-*.parquet" in patterns
    # 30 rows of the 27 subsets and one few-shot row for each
    (row,) = out.getvalue().splitlines()[1:]  # the table's header, then the set's row
    expected = "bbh fetched Joschka/big_bench_hard@76eaa8c29ad4: the 27 subsets, 28 files, 57 rows"
    assert " ".join(row.split()) == expected


def test_each_config_is_read_from_the_pinned_snapshot_by_its_path(tmp_path):
    """A multi-config set: one pattern per config; every one must be in the snapshot."""
    revision = "ab" * 20
    snap = tmp_path / "datasets--someone--multi" / "snapshots" / revision
    (tmp_path / "datasets--someone--multi" / "refs").mkdir(parents=True)
    (tmp_path / "datasets--someone--multi" / "refs" / "main").write_text(revision)
    for config in ("alpha", "beta"):
        (snap / config).mkdir(parents=True)
        pq.write_table(
            pa.table({"q": [config]}), snap / config / f"{config}-00000-of-00001.parquet"
        )
    files = ("alpha/alpha-*.parquet", "beta/beta-*.parquet")
    multi = HubSet("someone/multi", revision, files, "each config")
    assert records_by_file("demo", multi, cache=tmp_path) == {
        "alpha/alpha-00000-of-00001.parquet": [{"q": "alpha"}],
        "beta/beta-00000-of-00001.parquet": [{"q": "beta"}],
    }
    missing = HubSet("someone/multi", revision, (*files, "gamma/gamma-*.parquet"), "each")
    with pytest.raises(MissingDataset, match=r"no file matches 'gamma/gamma-\*.parquet'"):
        records_by_file("demo", missing, cache=tmp_path)
