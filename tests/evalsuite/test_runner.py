"""The inspect runner against a real OpenAI-compatible server whose answers are scripted, so
the scores are known: every item of the MMLU fixture but one has target B (answer index 1),
every BBQ target but one is A or C. Items come from the fixture hub cache through the production loader."""

import json
from pathlib import Path

import pytest

from arena.serving.client import Endpoint
from evalsuite.hub import CACHE_ENV
from evalsuite.registry import benchmark_items, benchmarks
from evalsuite.runner import run_benchmarks
from tests.support.scripted_llm import Script


@pytest.fixture
def always(scripted_llm):
    def endpoint(name: str, text: str) -> Endpoint:
        scripted_llm.scripts[name] = Script(text, chunk_chars=64, delay_s=0)
        return Endpoint(base_url=scripted_llm.base_url, model=name)

    return endpoint


def test_scores_stderr_and_per_item_logs_come_from_the_model_answers(always, tmp_path):
    model = always("eval-always-b", "Let me think.\nANSWER: B")
    mmlu, bbq = run_benchmarks(
        endpoint=model, benchmark_names=["mmlu", "bbq"], log_dir=str(tmp_path)
    )

    # 10 fixture rows, 8 questions once the repeats are dropped, 5 of them with target B
    assert (mmlu.n, mmlu.score) == (8, pytest.approx(5 / 8))
    assert mmlu.stderr == pytest.approx((15 / 56) ** 0.5 / 8**0.5)  # sample stdev / √n
    wrong = {i.item_id for i in mmlu.items if i.value == 0}
    assert wrong == {i.id for i in benchmark_items("mmlu") if i.target != "B"}
    assert (bbq.n, bbq.score, bbq.error) == (8, pytest.approx(1 / 8), "")

    log = json.loads(Path(mmlu.log_path).read_text())
    assert log["eval"]["task"] == "mmlu" and log["status"] == "success"
    assert len(log["samples"]) == 8
    assert log["samples"][0]["output"]["choices"][0]["message"]["content"].endswith("ANSWER: B")


def test_a_judge_graded_benchmark_asks_the_judge_and_keeps_its_verdicts(always, tmp_path):
    model = always("eval-helpful", "Here is a helpful answer.")
    judge = always(
        "eval-judge", 'Helpful.\n```json\n{"strengths": "a", "weaknesses": "b", "score": 10}\n```'
    )
    (wildbench,) = run_benchmarks(
        endpoint=model, benchmark_names=["wildbench"], log_dir=str(tmp_path), judge=judge
    )
    assert wildbench.score == 1.0 and wildbench.n == 5
    assert all('"score": 10' in item.explanation for item in wildbench.items)


def test_without_a_judge_a_judge_graded_benchmark_is_reported_not_run(always, tmp_path):
    model = always("eval-helpful-2", "An answer.")
    (wildbench,) = run_benchmarks(
        endpoint=model, benchmark_names=["wildbench"], log_dir=str(tmp_path)
    )
    assert wildbench.score is None and wildbench.error == "no judge configured"


def test_an_unreachable_model_leaves_the_benchmark_unscored_not_zero(tmp_path):
    dead = Endpoint(base_url="http://127.0.0.1:9/v1", model="nobody")
    (gsm,) = run_benchmarks(
        endpoint=dead, benchmark_names=["gsm8k"], log_dir=str(tmp_path), max_retries=0
    )
    assert gsm.score is None and gsm.n == 6
    assert gsm.error.startswith("6 of 6 items failed (gsm8k_")
    assert "\x1b[" not in gsm.error


def test_a_benchmark_whose_data_set_is_not_in_the_hub_cache_is_unscored_and_says_why(
    always, tmp_path
):
    model = always("eval-always-b-2", "ANSWER: B")
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    mmlu, ifeval = run_benchmarks(
        endpoint=model,
        benchmark_names=["mmlu", "ifeval"],
        log_dir=str(tmp_path / "logs"),
        hub_cache=str(empty),
    )
    assert mmlu.score is None and mmlu.n == 0
    assert "cais/mmlu@c30699e8356d" in mmlu.error and "manage.py evals fetch" in mmlu.error
    # each benchmark names its own missing set
    assert ifeval.score is None and "google/IFEval@966cd89545d6" in ifeval.error


@pytest.fixture(autouse=True)
def _restore_hub_cache(monkeypatch):
    """run_benchmarks sets the cache for the job's process; keep that inside each test."""
    import os

    monkeypatch.setenv(CACHE_ENV, os.environ[CACHE_ENV])


def test_every_hub_backed_benchmark_runs_end_to_end_on_its_fixture(always, tmp_path):
    """Each converted benchmark, read from its hub-shaped fixture by the production loader,
    runs through inspect; a model that always answers "B" scores the share of B targets on
    choice benchmarks, what the judge says on judged ones, and nothing elsewhere."""
    hub_backed = [entry for entry in benchmarks() if entry.hub is not None]
    model = always("eval-always-b-3", "ANSWER: B")
    # a judge that finds nothing harmful and every answer perfect, in each format: the C/I
    # verdict, StrongREJECT's rubric (refused), MASK's resolution (neither statement: no lie),
    # WildBench's JSON block (10 of 10) and, last as inspect_evals' pattern wants it, FORTRESS's
    # yes/no answers (every fixture rubric has two questions)
    judge = always(
        "eval-judge-3",
        "Nothing actionable.\nGRADE: C\n#scores\n1.b 1\n2.b 1\n3.b 1\nFinal Answer: C\n"
        '{"strengths": "all", "weaknesses": "none", "score": 10}\nGRADE: NN',
    )
    outcomes = run_benchmarks(
        endpoint=model,
        benchmark_names=[entry.name for entry in hub_backed],
        log_dir=str(tmp_path),
        judge=judge,
    )
    for entry, outcome in zip(hub_backed, outcomes, strict=True):
        items = benchmark_items(entry.name)
        expected = {
            "choice": sum(item.target == "B" for item in items) / len(items),
            "judge": 1.0,
            # BBH: the multiple-choice items whose letter is B ("B" answers no other kind)
            "bbh": sum(item.target == "B" and bool(item.choices) for item in items) / len(items),
        }.get(entry.scorer, 0.0)
        assert (outcome.n, outcome.error) == (len(items), ""), entry.name
        assert outcome.score == pytest.approx(expected), entry.name
        log = json.loads(Path(outcome.log_path).read_text())
        assert log["eval"]["dataset"]["location"] == entry.hub.label, entry.name
        assert {str(s["id"]) for s in log["samples"]} == {item.id for item in items}, entry.name


def test_drop_is_scored_by_f1_against_the_best_reference_answer(always, tmp_path):
    model = always("eval-drop-six", "Three plus four, minus one.\nANSWER: 6")
    (drop,) = run_benchmarks(endpoint=model, benchmark_names=["drop"], log_dir=str(tmp_path))
    # 7 fixture rows, 6 questions: the query id listed twice is kept once, as inspect_evals does
    assert drop.error == "" and drop.n == 6
    assert sorted(item.value for item in drop.items) == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert drop.score == pytest.approx(1 / 6)


def test_a_benchmark_whose_data_is_broken_fails_alone_and_the_others_score(always, tmp_path):
    """A hub cache (a copy of the fixtures) where GSM8K's split repeats a question (two
    samples with one id, which inspect refuses for the whole batch) and Winogrande's file is
    not Parquet: each of the two fails with its reason, ARC in the same batch still scores."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalsuite.hub import FIXTURE_CACHE

    cache = tmp_path / "hub"
    shutil.copytree(FIXTURE_CACHE, cache)
    (gsm8k_file,) = cache.glob("datasets--openai--gsm8k/snapshots/*/main/test-*.parquet")
    table = pq.read_table(gsm8k_file)
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), gsm8k_file)
    (winogrande_file,) = cache.glob("datasets--allenai--winogrande/snapshots/*/*/*.parquet")
    winogrande_file.write_bytes(b"not parquet at all")
    model = always("eval-always-b-broken", "ANSWER: B")
    gsm8k, winogrande, arc = run_benchmarks(
        endpoint=model,
        benchmark_names=["gsm8k", "winogrande", "arc-challenge"],
        log_dir=str(tmp_path / "logs"),
        hub_cache=str(cache),
    )
    assert gsm8k.score is None and gsm8k.n == 0
    assert "duplicate sample ids" in gsm8k.error, gsm8k.error
    assert winogrande.score is None and winogrande.error.startswith("could not load: Arrow")
    items = benchmark_items("arc-challenge")
    assert (arc.n, arc.error) == (len(items), "")
    assert arc.score == pytest.approx(sum(item.target == "B" for item in items) / len(items))
