"""The hub loader: a pinned snapshot is resolved from the hub cache without the network, and
its split's files are read in their own format."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from evalsuite import hub
from evalsuite.hub import CACHE_ENV, HubSet, MissingDataset

REVISION = "0123456789abcdef0123456789abcdef01234567"
SET = HubSet("someone/set", REVISION, ("data/test-*.parquet", "extra.jsonl"), "test")


def cached(cache, files):
    """A hub cache holding `someone/set` at REVISION with the given files."""
    repo = cache / "datasets--someone--set"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    for name, write in files.items():
        path = repo / "snapshots" / REVISION / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    return cache


def test_rows_of_every_split_file_are_read_in_order_from_the_pinned_snapshot(tmp_path):
    cache = cached(tmp_path, {
        "data/test-00001-of-00002.parquet": lambda p: pq.write_table(pa.table({"q": ["b"]}), p),
        "data/test-00000-of-00002.parquet": lambda p: pq.write_table(pa.table({"q": ["a"]}), p),
        "data/train-00000-of-00001.parquet": lambda p: pq.write_table(pa.table({"q": ["x"]}), p),
        "extra.jsonl": lambda p: p.write_text(json.dumps({"q": "c"}) + "\n\n"),
    })  # fmt: skip
    rows = hub.records("demo", SET, cache=cache)
    assert [row["q"] for row in rows] == ["a", "b", "c"]
    # each row names its file in the repository (MASK's archetype is its config folder)
    assert [row["source_file"] for row in rows] == [
        "data/test-00000-of-00002.parquet",
        "data/test-00001-of-00002.parquet",
        "extra.jsonl",
    ]


def test_another_revision_of_the_same_set_is_missing_not_substituted(tmp_path):
    cache = cached(tmp_path, {"extra.jsonl": lambda p: p.write_text("{}\n")})
    other = HubSet("someone/set", "f" * 40, ("extra.jsonl",), "test")
    with pytest.raises(MissingDataset, match="someone/set@ffffffffffff .* no snapshot"):
        hub.records("demo", other, cache=cache)


def test_a_snapshot_without_the_splits_files_is_missing(tmp_path):
    cache = cached(tmp_path, {"extra.jsonl": lambda p: p.write_text("{}\n")})
    with pytest.raises(MissingDataset, match=r"no file matches 'data/test-\*.parquet'"):
        hub.records("demo", SET, cache=cache)


def test_csv_and_tsv_rows_are_read_by_header(tmp_path):
    (tmp_path / "a.tsv").write_text("question\tanswer\nTwo plus two?\t4\n")
    (tmp_path / "b.csv").write_text('question,answer\n"One, two?",3\n')
    assert hub.read_rows(tmp_path / "a.tsv") == [{"question": "Two plus two?", "answer": "4"}]
    assert hub.read_rows(tmp_path / "b.csv") == [{"question": "One, two?", "answer": "3"}]


def test_the_cache_is_the_configured_one_else_huggingface_hubs(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert hub.cache_dir() == tmp_path
    monkeypatch.delenv(CACHE_ENV)
    from huggingface_hub import constants

    assert str(hub.cache_dir()) == constants.HF_HUB_CACHE


def test_evals_run_stops_before_queueing_when_a_set_is_not_fetched(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with pytest.raises(CommandError) as stopped:
        call_command("evals", "run", "--phase", "no-such-phase", "--benchmark", "mmlu")
    assert "benchmark mmlu: data set cais/mmlu@c30699e8356d" in str(stopped.value)
    assert "python manage.py evals fetch" in str(stopped.value)


def test_fetch_asks_the_hub_for_the_pinned_split_files_and_fails_when_none_match(
    monkeypatch, tmp_path
):
    """The hub itself cannot be reached here: a stand-in for `snapshot_download` records the
    request and lays the files out as the hub client does."""
    import huggingface_hub

    requests = []

    def snapshot_download(repo_id, **kwargs):
        requests.append((repo_id, kwargs))
        folder = tmp_path / "snap"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"q": ["a", "b"]}), folder / "data" / "test-00000-of-00001.parquet")
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    split = HubSet("someone/set", REVISION, ("data/test-*.parquet",), "test")
    (path,) = hub.fetch("demo", split, cache=tmp_path)
    assert hub.read_rows(path) == [{"q": "a"}, {"q": "b"}]
    repo_id, kwargs = requests[0]
    assert repo_id == "someone/set" and kwargs["revision"] == REVISION
    assert kwargs["repo_type"] == "dataset" and kwargs["allow_patterns"] == ["data/test-*.parquet"]
    assert kwargs["cache_dir"] == str(tmp_path) and kwargs["local_files_only"] is False

    with pytest.raises(hub.FetchFailed, match="someone/set@0123456789ab has no file matching"):
        hub.fetch("demo", SET, cache=tmp_path)  # SET also wants extra.jsonl


def test_a_file_set_is_read_from_the_cache_by_url_and_fetched_only_with_its_checksum(
    monkeypatch, tmp_path
):
    import hashlib
    import io
    import urllib.request

    body = b"question,answer\nTwo plus two?,4\n"
    pinned = hub.PinnedFile("https://example.org/c0ffee/set.csv", "0" * 64, "test")
    with pytest.raises(MissingDataset, match=r"set.csv@000000000000 \(test split\)"):
        hub.records("demo", pinned, cache=tmp_path)

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(body))
    with pytest.raises(hub.FetchFailed, match="not the pinned 0000"):
        hub.fetch("demo", pinned, cache=tmp_path)
    assert not pinned.path(tmp_path).exists()

    right = hub.PinnedFile(pinned.url, hashlib.sha256(body).hexdigest(), "test")
    hub.fetch("demo", right, cache=tmp_path)
    assert hub.records("demo", right, cache=tmp_path) == [
        {"question": "Two plus two?", "answer": "4"}
    ]


def test_evals_fetch_reports_each_set_it_fetched_and_each_still_on_a_sample(monkeypatch):
    """The hub is out of reach here: the stand-in answers as the hub client does once the
    files are downloaded, with the fixture snapshot's folder."""
    import io

    import huggingface_hub

    from evalsuite.hub import FIXTURE_CACHE

    def snapshot_download(repo_id, *, revision, **kwargs):
        return str(FIXTURE_CACHE / f"datasets--{repo_id.replace('/', '--')}/snapshots/{revision}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    out = io.StringIO()
    call_command("evals", "fetch", "--benchmark", "gsm8k", "--benchmark", "mmlu", stdout=out)
    _, gsm8k, mmlu = out.getvalue().splitlines()
    assert (
        " ".join(gsm8k.split()) == "gsm8k fetched openai/gsm8k@cc7b047b6e5b: test, 1 files, 6 rows"
    )
    assert " ".join(mmlu.split()).startswith("mmlu fetched cais/mmlu@c30699e8356d: test, 1 files")


def _evals_fetch(env_extra, *names):
    """`manage.py evals fetch` in its own process (huggingface_hub reads HF_ENDPOINT when it
    is imported), with the environment of the test and `env_extra`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    dropped = (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
    )  # the runner sets the first two
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_extra)
    args = [a for name in names for a in ("--benchmark", name)]
    return subprocess.run(
        [sys.executable, "manage.py", "evals", "fetch", *args],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_evals_fetch_tells_gated_from_missing_keeps_going_and_sends_hf_token(tmp_path):
    """The real hub client against a local server that answers as the hub does: MASK is
    gated (401 without a token, 403 with another account's), the hub holds GSM8K at another
    revision and no MMLU at all; FORTRESS, after MASK, is still fetched, and the table names
    each failure's kind. With HF_TOKEN set to a token of an account that accepted MASK's
    terms, MASK is fetched."""
    from evalsuite.hub import FIXTURE_CACHE
    from evalsuite.registry import benchmark
    from tests.support.fake_hub import FakeHub, fake_hub

    def served(name):
        entry = benchmark(name).hub
        folder = FIXTURE_CACHE / f"datasets--{entry.repo_id.replace('/', '--')}"
        return entry.repo_id, (entry.revision, folder / "snapshots" / entry.revision)

    gsm8k_repo, (_, gsm8k_folder) = served("gsm8k")
    state = FakeHub(
        repos=dict([served("mask"), served("fortress"), (gsm8k_repo, ("f" * 40, gsm8k_folder))]),
        gated={"cais/MASK": {"hf_accepted"}},
    )
    cache = tmp_path / "hub"
    with fake_hub(state):
        env = {"HF_ENDPOINT": state.url, CACHE_ENV: str(cache)}
        first = _evals_fetch(env, "mask", "fortress", "gsm8k", "mmlu")
        wrong = _evals_fetch({**env, "HF_TOKEN": "hf_someone_else"}, "mask")
        second = _evals_fetch({**env, "HF_TOKEN": "hf_accepted"}, "mask")

    assert first.returncode != 0, first.stdout + first.stderr
    table = {line.split()[0]: line for line in first.stdout.splitlines()[1:]}
    assert set(table) == {"mask", "fortress", "gsm8k", "mmlu"}, first.stdout + first.stderr
    assert "FAILED (gated)" in table["mask"] and "HF_TOKEN" in table["mask"]
    assert "fetched" in table["fortress"] and "1 files" in table["fortress"]
    assert "FAILED (missing)" in table["gsm8k"] and "no such revision" in table["gsm8k"]
    assert "FAILED (missing)" in table["mmlu"] and "no such repository" in table["mmlu"]
    assert "3 of 4 sets not fetched" in first.stderr
    fortress = benchmark("fortress")
    assert hub.records("fortress", fortress.hub, cache=cache) == hub.records(
        "fortress", fortress.hub, cache=FIXTURE_CACHE
    )
    assert wrong.returncode != 0 and "FAILED (gated)" in wrong.stdout
    assert second.returncode == 0, second.stdout + second.stderr
    assert "mask" in second.stdout and "fetched" in second.stdout
    hub.require("mask", benchmark("mask").hub, cache=cache)


@pytest.mark.django_db
def test_evals_run_refuses_only_the_benchmarks_whose_set_is_not_fetched(monkeypatch, tmp_path):
    """A cache holding GSM8K alone: MMLU is refused with the fetch command, GSM8K is queued."""
    import io
    import shutil

    from evalsuite.hub import FIXTURE_CACHE
    from evalsuite.management.commands import evals
    from tests.factories import running_phase

    shutil.copytree(FIXTURE_CACHE / "datasets--openai--gsm8k", tmp_path / "datasets--openai--gsm8k")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    running_phase()
    queued = []
    monkeypatch.setattr(
        evals, "evaluations_queue", lambda **kwargs: queued.append(kwargs["benchmark_names"]) or []
    )
    err = io.StringIO()
    call_command(
        "evals",
        "run",
        "--phase",
        "phase-1",
        "--benchmark",
        "gsm8k",
        "--benchmark",
        "mmlu",
        stderr=err,
    )
    assert queued == [["gsm8k"]]
    assert "not run: benchmark mmlu: data set cais/mmlu@c30699e8356d" in err.getvalue()
    assert "FORTRESS" not in err.getvalue()  # not asked for
    assert "python manage.py evals fetch" in err.getvalue()


@pytest.mark.django_db
def test_evals_run_warns_when_a_fortress_judge_upstream_is_not_on_the_proxy(monkeypatch, settings):
    import io

    from evalsuite.management.commands import evals
    from tests.factories import running_phase

    settings.EVALS_FORTRESS_JUDGES = ["judge-a", "judge-b"]
    running_phase()
    monkeypatch.setattr(evals, "evaluations_queue", lambda **kwargs: [])
    err = io.StringIO()
    call_command("evals", "run", "--phase", "phase-1", "--benchmark", "fortress", stderr=err)
    assert "FORTRESS judge upstreams judge-a, judge-b (EVALS_FORTRESS_JUDGES)" in err.getvalue()
