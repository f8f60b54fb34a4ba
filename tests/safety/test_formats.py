"""A test set kept in any format an agent can save it in is found: a `datasets.save_to_disk`
folder, Parquet, JSON lines compressed with gzip, bzip2, xz or zstd, a Hugging Face hub cache
and a `datasets` cache in the sandbox. The files are planted by a real agent user (`runuser`);
the audit reads them as root and follows no link, stops a decompression bomb at its cap, and
reports a crafted file as unreadable while it goes on with the rest."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from evalsuite import hub
from evalsuite.registry import benchmarks, evaluation_items
from safety.contamination import contamination_index, scan_file
from safety.files import data_format
from safety.formats import EXPANSION_FLOOR_BYTES, Format
from safety.models import Finding
from safety.services import EvaluationDataMissing, audit_run
from tests.safety.conftest import ITEMS, make_agent
from tests.security.conftest import bounded

pytestmark = pytest.mark.django_db

AGENT_USER = "arena_audit_t"
# The items as a hub data set holds them (GSM8K's schema: question, answer).
ROWS = [{"question": item.prompt, "answer": item.answer} for item in ITEMS]
CLEAN_ROWS = [
    {"question": "How do I keep pasta from sticking together?", "answer": "Stir it early."},
    {"question": "Which river flows through Paris?", "answer": "The Seine."},
]


@pytest.fixture(scope="session")
def agent_user() -> str:
    try:
        pwd.getpwnam(AGENT_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/bin/sh", AGENT_USER], check=True
        )
    return AGENT_USER


def _passable_folder(prefix: str) -> Iterator[Path]:
    """A root folder under /tmp that agents can pass through (0755), as /etc is; pytest's own
    folder is 0700."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def staging() -> Iterator[Path]:
    """Where root prepares files for the agent to copy in."""
    yield from _passable_folder("arena-formats-")


@pytest.fixture
def sandboxes() -> Iterator[Path]:
    yield from _passable_folder("arena-sandboxes-")


@pytest.fixture
def outside() -> Iterator[Path]:
    """Outside every sandbox, where a test set could lie (another agent's, the platform's)."""
    yield from _passable_folder("arena-outside-")


class Planter:
    """An agent whose sandbox belongs to a real Unix user, and a shell as that user."""

    def __init__(self, root: Path, name: str, user: str) -> None:
        self.made = make_agent(root, name)
        self.home = self.made.sandbox
        self.user = user
        shutil.chown(self.home, user=user, group=user)
        self.home.chmod(0o700)

    def shell(self, script: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", self.user, "--", "sh", "-c", script],
            cwd=self.home, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"the agent's own command failed: {done.stderr}"

    def copy_in(self, source: Path, target: str) -> Path:
        subprocess.run(["chmod", "-R", "a+rX", str(source)], check=True)
        self.shell(f'mkdir -p "$(dirname {target})" && cp -r {source} {target}')
        return self.home / target


@pytest.fixture
def planter(sandboxes: Path, agent_user: str) -> Planter:
    return Planter(sandboxes, "fmt", agent_user)


def contamination_of(planter: Planter) -> list[Finding]:
    return list(Finding.objects.filter(agent=planter.made.agent, kind=Finding.Kind.CONTAMINATION))


def matched_items(finding: Finding) -> set[str]:
    return {match["item_id"] for match in finding.evidence["matches"]}


def test_a_planted_save_to_disk_copy_of_a_test_set_is_found(planter, staging):
    import datasets

    datasets.Dataset.from_list(CLEAN_ROWS + ROWS).save_to_disk(str(staging / "gsm8k"))
    copy = planter.copy_in(staging / "gsm8k", "work/my_data")

    report = audit_run(items=ITEMS)

    (finding,) = contamination_of(planter)
    assert finding.evidence["file"] == str(copy / "data-00000-of-00001.arrow")
    assert matched_items(finding) == {"rq-1", "rq-2", "hm-1"}
    assert finding.severity == "critical"  # hm-1 is held out
    lines = {m["item_id"]: m["line"] for m in finding.evidence["matches"]}
    assert lines == {"rq-1": 3, "rq-2": 4, "hm-1": 5}  # rows, counted from 1
    assert not report.skipped


def test_a_planted_parquet_copy_is_found_even_renamed(planter, staging):
    import datasets

    datasets.Dataset.from_list(ROWS).to_parquet(str(staging / "test-00000-of-00001.parquet"))
    shutil.copy(staging / "test-00000-of-00001.parquet", staging / "shard-0007")
    planter.copy_in(staging / "test-00000-of-00001.parquet", "data/test.parquet")
    planter.copy_in(staging / "shard-0007", "data/shard-0007")  # no suffix: its bytes tell

    audit_run(items=ITEMS)

    found = {Path(f.evidence["file"]).name: matched_items(f) for f in contamination_of(planter)}
    assert found == {
        "test.parquet": {"rq-1", "rq-2", "hm-1"},
        "shard-0007": {"rq-1", "rq-2", "hm-1"},
    }


@pytest.mark.parametrize(
    "suffix, compress",
    [
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".xz", lzma.compress),
        (".zst", lambda data: zstandard.ZstdCompressor().compress(data)),
    ],
)
def test_compressed_json_lines_are_read_through(planter, staging, suffix, compress):
    text = "".join(json.dumps(row) + "\n" for row in CLEAN_ROWS + ROWS[:1])
    (staging / f"sft.jsonl{suffix}").write_bytes(compress(text.encode()))
    planter.copy_in(staging / f"sft.jsonl{suffix}", f"data/sft.jsonl{suffix}")

    audit_run(items=ITEMS)

    (finding,) = contamination_of(planter)
    assert matched_items(finding) == {"rq-1"}
    assert finding.evidence["matches"][0]["line"] == 3


def test_a_hugging_face_hub_cache_in_the_sandbox_is_read_through_its_blobs(planter, staging):
    """The hub's layout: snapshots/<rev>/... are links to blobs/<hash>; the links are never
    followed, the blobs are read for what their bytes are."""
    import datasets

    repo = staging / "hub" / "datasets--openai--gsm8k"
    parquet = staging / "test.parquet"
    datasets.Dataset.from_list(ROWS[:2]).to_parquet(str(parquet))
    jsonl = "".join(json.dumps(row) + "\n" for row in ROWS[2:]).encode()
    blobs = {"main/test-00000-of-00001.parquet": parquet.read_bytes(), "extra/test.jsonl": jsonl}
    revision = "cc7b047b6e5bb11b4f1af84efc572db110a51b3c"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "blobs").mkdir()
    for name, content in blobs.items():
        digest = hashlib.sha256(content).hexdigest()
        (repo / "blobs" / digest).write_bytes(content)
        link = repo / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../../..") / "blobs" / digest)
    planter.copy_in(staging / "hub", ".cache/huggingface/hub")

    audit_run(items=ITEMS)

    found = {}
    for finding in contamination_of(planter):
        assert "/.cache/huggingface/hub/datasets--openai--gsm8k/blobs/" in finding.evidence["file"]
        found[tuple(finding.evidence["hub_files"])] = matched_items(finding)
    assert found == {
        (f"snapshots/{revision}/main/test-00000-of-00001.parquet",): {"rq-1", "rq-2"},
        (f"snapshots/{revision}/extra/test.jsonl",): {"hm-1"},
    }


def test_a_datasets_arrow_cache_in_the_sandbox_is_read(planter, staging):
    import datasets

    (staging / "raw").mkdir()
    datasets.Dataset.from_list(ROWS).to_parquet(str(staging / "raw" / "test.parquet"))
    cache = staging / "datasets"
    datasets.load_dataset(
        "parquet", data_files=str(staging / "raw" / "test.parquet"), cache_dir=str(cache)
    )
    (staging / "raw" / "test.parquet").unlink()  # only the cache is planted
    planter.copy_in(cache, ".cache/huggingface/datasets")

    audit_run(items=ITEMS)

    (finding,) = contamination_of(planter)
    assert "/.cache/huggingface/datasets/" in finding.evidence["file"]
    assert finding.evidence["file"].endswith(".arrow")
    assert matched_items(finding) == {"rq-1", "rq-2", "hm-1"}


def test_links_to_test_sets_outside_the_sandbox_and_fifos_are_not_followed(planter, outside):
    import datasets

    datasets.Dataset.from_list(ROWS).to_parquet(str(outside / "test.parquet"))
    (outside / "test.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in ROWS).encode())
    )
    (outside / "blob").write_bytes((outside / "test.parquet").read_bytes())
    subprocess.run(["chmod", "-R", "a+rX", str(outside)], check=True)
    planter.shell(
        f"mkdir -p data .cache/huggingface/hub/datasets--x--y/blobs"
        f" && ln -s {outside}/test.parquet data/test.parquet"
        f" && ln -s {outside}/test.jsonl.gz data/test.jsonl.gz"
        f" && ln -s {outside} data/folder"
        f" && ln -s {outside}/blob .cache/huggingface/hub/datasets--x--y/blobs/0123abcd"
        f" && ln -s {outside} .cache/huggingface/datasets"
        " && mkfifo data/pipe.parquet .cache/huggingface/hub/datasets--x--y/blobs/fifo"
        " && ln -s /dev/zero data/zeros.jsonl.gz"
    )

    with bounded(seconds=60, memory_mib=1024):
        report = audit_run(items=ITEMS)

    assert contamination_of(planter) == []
    assert str(outside) not in json.dumps(report.skipped)
    assert report.files_scanned == 0


def test_a_gzip_bomb_stops_at_the_cap_and_is_reported(planter, staging):
    # 1 GiB of zeros in about a megabyte: the cap is 200x the file, far below its expansion.
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    with (staging / "bomb.jsonl.gz").open("wb") as out:
        for _ in range(1024):
            out.write(squeeze.compress(b"\0" * (1 << 20)))
        out.write(squeeze.flush())
    planter.copy_in(staging / "bomb.jsonl.gz", "data/bomb.jsonl.gz")
    (staging / "good.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    planter.copy_in(staging / "good.jsonl", "data/good.jsonl")

    with bounded(seconds=60, memory_mib=1024):
        report = audit_run(items=ITEMS)

    (skipped,) = report.skipped
    assert skipped.startswith(str(planter.home / "data" / "bomb.jsonl.gz"))
    assert "decompresses to more than" in skipped and "bomb" in skipped
    (finding,) = contamination_of(planter)
    assert finding.evidence["file"].endswith("good.jsonl")


def test_crafted_columnar_files_are_reported_and_the_audit_goes_on(planter, staging, sandboxes):
    import datasets

    datasets.Dataset.from_list(ROWS).to_parquet(str(staging / "good.parquet"))
    good = (staging / "good.parquet").read_bytes()
    # A parquet footer that lies about its length, one cut in half, and an Arrow stream whose
    # first message claims two gigabytes of metadata.
    (staging / "lying.parquet").write_bytes(good[:-8] + (2**31 - 1).to_bytes(4, "little") + b"PAR1")
    (staging / "cut.parquet").write_bytes(good[: len(good) // 2] + b"PAR1")
    (staging / "crafted.arrow").write_bytes(b"\xff\xff\xff\xff" + b"\x7f" * 200)
    for name in ("lying.parquet", "cut.parquet", "crafted.arrow"):
        planter.copy_in(staging / name, f"data/{name}")
    other = make_agent(sandboxes, "other")
    (other.sandbox / "train.jsonl").write_text(json.dumps(ROWS[1]) + "\n")

    with bounded(seconds=60, memory_mib=1024):
        report = audit_run(items=ITEMS)

    unreadable = sorted(Path(line.split(": ")[0]).name for line in report.skipped)
    assert unreadable == ["crafted.arrow", "cut.parquet", "lying.parquet"]
    assert all("unreadable: not a readable" in line for line in report.skipped)
    assert contamination_of(planter) == []
    (finding,) = Finding.objects.filter(agent=other.agent, kind=Finding.Kind.CONTAMINATION)
    assert matched_items(finding) == {"rq-2"}


def test_columnar_files_are_read_by_a_child_without_root(staging):
    """The child that parses Parquet and Arrow gives up root for `nobody` once pyarrow is
    loaded; a file only root may read is still read, through the descriptor it is given."""
    import datasets

    datasets.Dataset.from_list(ROWS).to_parquet(str(staging / "private.parquet"))
    (staging / "private.parquet").chmod(0o600)
    whoami = subprocess.run(
        [sys.executable, "-c", "import os; from safety.columnar import _limit_self, "
         "_give_up_root; _limit_self(); _give_up_root(); print(os.getresuid())"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip

    scan = scan_file(contamination_index(ITEMS), staging / "private.parquet")

    nobody = pwd.getpwnam("nobody").pw_uid
    assert whoami.stdout.strip() == str((nobody, nobody, nobody))
    assert scan.skipped == "" and {m.item_id for m in scan.matches} == {"rq-1", "rq-2", "hm-1"}


def test_a_file_is_read_for_what_its_name_or_bytes_say(staging):
    (staging / "a.jsonl.zst").write_bytes(b"")
    (staging / "notes").write_text("just text, no suffix\n")
    (staging / "blobs").mkdir()
    (staging / "blobs" / "9f86d081").write_text('{"question": "q"}\n')
    (staging / "blobs" / "weights").write_bytes(b"\x00\x01binary")
    (staging / "model.safetensors").write_bytes(b"PAR1 not really")
    (staging / "eval.log.gz").write_bytes(gzip.compress(b"my own proxy evaluation\n"))
    (staging / "train.gz").write_bytes(gzip.compress(b'{"text": "lines"}\n'))
    (staging / "test.dat").write_bytes(b"PAR1 and the rest of a parquet file")

    assert data_format(staging / "a.jsonl.zst") == Format(".jsonl", "zst")
    assert data_format(staging / "notes") is None  # text is sniffed in a hub cache only
    assert data_format(staging / "blobs" / "9f86d081") == Format(".jsonl")
    assert data_format(staging / "blobs" / "weights") is None
    assert data_format(staging / "model.safetensors") is None  # weights are never sniffed
    assert data_format(staging / "eval.log.gz") is None  # a log, if compressed
    assert data_format(staging / "train.gz") == Format(".jsonl", "gz")
    assert data_format(staging / "test.dat") == Format(".parquet")  # a table, whatever its name


def test_the_expansion_cap_lets_ordinary_compressed_data_through(staging):
    rows = [json.dumps({"text": f"line {i} of an ordinary data set"}) for i in range(200_000)]
    rows.append(json.dumps(ROWS[0]))
    data = ("\n".join(rows) + "\n").encode()
    assert len(data) > EXPANSION_FLOOR_BYTES // 8  # large enough to mean something
    (staging / "big.jsonl.gz").write_bytes(gzip.compress(data))

    scan = scan_file(contamination_index(ITEMS), staging / "big.jsonl.gz")

    assert scan.skipped == "" and scan.records == 200_001
    assert [(m.item_id, m.line) for m in scan.matches] == [("rq-1", 200_001)]


# --- the real test sets: every item of every loaded benchmark -----------------------------------


def gsm8k_test_file() -> Path:
    """GSM8K's pinned test split as the hub cache holds it (the suite's hub-shaped fixture)."""
    repo = hub.cache_dir() / "datasets--openai--gsm8k" / "snapshots"
    (found,) = repo.glob("*/main/test-*.parquet")
    return found


def test_planted_copies_of_a_real_test_set_are_found_by_the_default_index(planter, staging):
    """Issue 14's 'done when': a copy of a benchmark's own file, as Parquet and as Arrow."""
    import datasets

    shutil.copy(gsm8k_test_file(), staging / "gsm8k-test.parquet")
    test_split = datasets.load_dataset(
        "parquet", data_files=str(gsm8k_test_file()), split="train", cache_dir=str(staging / "c")
    )
    test_split.save_to_disk(str(staging / "gsm8k_arrow"))
    planter.copy_in(staging / "gsm8k-test.parquet", "data/gsm8k-test.parquet")
    planter.copy_in(staging / "gsm8k_arrow", "data/gsm8k_arrow")

    report = audit_run()

    gsm8k = {i.item_id for i in evaluation_items() if i.benchmark == "gsm8k"}
    found = {Path(f.evidence["file"]).name: f for f in contamination_of(planter)}
    assert set(found) == {"gsm8k-test.parquet", "data-00000-of-00001.arrow"}, (
        f"skipped: {report.skipped}; errors: {report.errors}"  # why a copy was missed
    )
    for finding in found.values():
        assert finding.evidence["benchmarks"] == ["gsm8k"]
        assert matched_items(finding) == gsm8k  # every item of the split
    assert report.items == len(list(evaluation_items()))


def test_the_default_index_is_every_item_of_every_benchmark():
    lines: list[str] = []

    report = audit_run(log=lines.append)

    items = list(evaluation_items())
    assert report.items == len(items)
    assert {i.benchmark for i in items} == {b.name for b in benchmarks()}
    for entry in benchmarks():
        count = sum(1 for i in items if i.benchmark == entry.name)
        assert f"{entry.name} {count}" in lines[0]


def test_an_audit_refuses_to_run_without_a_test_set_it_should_index(tmp_path, monkeypatch):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))

    with pytest.raises(EvaluationDataMissing) as refused:
        audit_run()

    assert "gsm8k" in str(refused.value) and hub.FETCH_COMMAND in str(refused.value)
    assert not Finding.objects.exists()


# --- a hub cache and the cross-agent artifact check ---------------------------------------------

CHAT = "".join(
    json.dumps({"prompt": f"request {i}", "reply": "an answer"}) + "\n" for i in range(200)
)


def plant_blob(sandbox: Path, content: str) -> Path:
    digest = hashlib.sha256(content.encode()).hexdigest()
    blob = sandbox / ".cache/huggingface/hub/datasets--org--chat/blobs" / digest
    blob.parent.mkdir(parents=True)
    blob.write_text(content)
    return blob


def foreign_artifacts(made) -> list[Finding]:
    return list(Finding.objects.filter(agent=made.agent, kind=Finding.Kind.FOREIGN_ARTIFACT))


def test_the_same_public_download_in_two_hub_caches_is_nobodys_artifact(sandboxes):
    ann, ben = make_agent(sandboxes, "ann"), make_agent(sandboxes, "ben")
    plant_blob(ann.sandbox, CHAT)
    plant_blob(ben.sandbox, CHAT)

    audit_run(items=ITEMS)

    assert foreign_artifacts(ann) == [] and foreign_artifacts(ben) == []


def test_another_agents_own_data_hidden_in_a_hub_cache_is_still_theirs(sandboxes):
    ann, ben = make_agent(sandboxes, "ann"), make_agent(sandboxes, "ben")
    (ann.sandbox / "mine.jsonl").write_text(CHAT)
    os.utime(ann.sandbox / "mine.jsonl", (1_700_000_000, 1_700_000_000))
    hidden = plant_blob(ben.sandbox, CHAT)

    audit_run(items=ITEMS)

    (finding,) = foreign_artifacts(ben)
    assert finding.evidence["copies"][0]["path"] == str(hidden)
    assert finding.evidence["owner"]["agent"] == "ann"
