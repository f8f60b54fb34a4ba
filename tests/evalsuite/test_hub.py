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
    gsm8k, mmlu = out.getvalue().splitlines()
    assert gsm8k == "gsm8k: openai/gsm8k@cc7b047b6e5b test, 1 files, 6 rows"
    assert mmlu.startswith("mmlu: cais/mmlu@c30699e8356d test, 1 files, ")
