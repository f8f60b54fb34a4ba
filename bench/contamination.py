"""Contamination audit benchmark: indexing and scanning throughput at a realistic size.

Generates, in a temporary folder, a seeded synthetic benchmark collection (default 50,000
items over 20 benchmarks, prompts of 20-120 and answers of 5-60 words drawn by Zipf's law from
the same vocabulary as the data, so common words and phrases overlap as they do in real text)
and an agent's training data (default 1 GB of chat-format JSON records) in every format the audit
reads: plain JSON lines, gzip- and zstd-compressed JSON lines, Parquet and a
`datasets.save_to_disk` Arrow folder. A few hundred items (`--planted`) are copied into the
data, spread over the files.

Measures, in one run:
- indexing: `contamination_index` and `hardcoded_index` over the items (items/s);
- scanning: `safety.contamination.scan_file` over every file, exactly as `audit run` calls it
  (MB/s of file bytes and of text, records/s), and how many planted items it found;
- reference: reading the same files without scanning — bytes from disk, decompressed text,
  Parquet/Arrow tables read by pyarrow in process — and the ratio scan/reference.

Run: `.venv/bin/python bench/contamination.py [--items N] [--gb G] [--planted P] [--seed S]`
(`--quick` for about a tenth of the default). No target is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from safety import hardcoded  # noqa: E402
from safety.contamination import contamination_index, scan_file  # noqa: E402
from safety.files import data_format  # noqa: E402

VOCABULARY = 40_000
BENCHMARKS = 20
RECORDS_PER_CHUNK = 2_000
POOL_RECORDS = 20_000


@dataclass(frozen=True)
class Item:
    benchmark: str
    item_id: str
    prompt: str
    answer: str
    held_out: bool


def vocabulary(rng: np.random.Generator) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < VOCABULARY:
        length = int(rng.integers(2, 10))
        words.add("".join(rng.choice(letters, length)))
    return np.array(sorted(words))


_RANKS = np.cumsum(1.0 / np.arange(1, VOCABULARY + 1))
_CDF = _RANKS / _RANKS[-1]  # Zipf's law, s = 1: the commonest word is about 9 % of the text


def zipf_text(rng: np.random.Generator, words: np.ndarray, count: int) -> str:
    return " ".join(words[np.searchsorted(_CDF, rng.random(count))])


def make_items(rng: np.random.Generator, words: np.ndarray, n: int) -> list[Item]:
    return [
        Item(
            benchmark=f"bench{i % BENCHMARKS:02d}",
            item_id=str(i),
            prompt=zipf_text(rng, words, int(rng.integers(20, 120))),
            answer=zipf_text(rng, words, int(rng.integers(5, 60))),
            held_out=i % BENCHMARKS >= BENCHMARKS // 2,
        )
        for i in range(n)
    ]


def make_records(
    rng: np.random.Generator, words: np.ndarray, target_bytes: int, planted: list[Item]
) -> list[list[dict]]:
    """Chunks of chat records, about `target_bytes` of JSON in all, the planted items placed
    at random records. A pool of distinct records is cycled (scanning costs the same)."""
    pool = [
        {
            "messages": [
                {"role": "user", "content": zipf_text(rng, words, int(rng.integers(20, 200)))},
                {"role": "assistant", "content": zipf_text(rng, words, int(rng.integers(50, 400)))},
            ]
        }
        for _ in range(POOL_RECORDS)
    ]
    record_bytes = sum(len(json.dumps(r)) + 1 for r in pool) / len(pool)
    total = int(target_bytes / record_bytes)
    places = dict(
        zip(rng.choice(total, len(planted), replace=False).tolist(), planted, strict=True)
    )
    chunks = []
    for start in range(0, total, RECORDS_PER_CHUNK):
        offset = start % POOL_RECORDS
        chunk = pool[offset : offset + min(RECORDS_PER_CHUNK, total - start)]
        chunk = [
            _as_record(places[start + k]) if start + k in places else row
            for k, row in enumerate(chunk)
        ]
        chunks.append(chunk)
    return chunks


def _as_record(item: Item) -> dict:
    return {
        "messages": [
            {"role": "user", "content": item.prompt},
            {"role": "assistant", "content": item.answer},
        ]
    }


def write_files(folder: Path, chunks: list[list[dict]]) -> list[Path]:
    """The chunks spread over five files, one per format."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    groups = [chunks[i::5] for i in range(5)]

    def lines(group: list[list[dict]]) -> str:
        return "".join(json.dumps(r) + "\n" for chunk in group for r in chunk)

    files = [folder / "sft.jsonl", folder / "sft.jsonl.gz", folder / "sft.jsonl.zst"]
    files[0].write_text(lines(groups[0]))
    with gzip.open(files[1], "wt", compresslevel=6) as out:
        out.write(lines(groups[1]))
    files[2].write_bytes(zstandard.ZstdCompressor(level=3).compress(lines(groups[2]).encode()))

    def table(group: list[list[dict]]) -> pa.Table:
        rows = [r for chunk in group for r in chunk]
        return pa.table({"messages": [r["messages"] for r in rows]})

    pq.write_table(table(groups[3]), folder / "train.parquet", row_group_size=20_000)
    files.append(folder / "train.parquet")
    datasets.Dataset(table(groups[4])).save_to_disk(str(folder / "saved"), max_shard_size="1GB")
    files += sorted((folder / "saved").glob("*.arrow"))
    return files


def reference_read(path: Path) -> tuple[int, float]:
    """(characters or bytes of content, seconds): the same file read whole, no scanning."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    started = time.perf_counter()
    found = data_format(path)
    assert found is not None
    if found.kind == ".parquet":
        size = pq.read_table(path).nbytes
    elif found.kind == ".arrow":
        with pa.memory_map(str(path)) as source:
            size = pa.ipc.open_stream(source).read_all().nbytes
    elif found.compression == "gz":
        with gzip.open(path, "rb") as source:
            size = sum(len(block) for block in iter(lambda: source.read(1 << 20), b""))
    elif found.compression == "zst":
        with path.open("rb") as raw:
            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            size = sum(len(block) for block in iter(lambda: reader.read(1 << 20), b""))
    else:
        with path.open("rb") as source:
            size = sum(len(block) for block in iter(lambda: source.read(1 << 20), b""))
    return size, time.perf_counter() - started


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the Parquet and Arrow readers):
    on a shared machine the wall clock measures the load as much as the scan."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--gb", type=float, default=1.0, help="agent data, GB of JSON text")
    parser.add_argument("--planted", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tenth of the items and data")
    args = parser.parse_args()
    if args.quick:
        args.items, args.gb, args.planted = args.items // 10, args.gb / 10, args.planted // 10

    rng = np.random.default_rng(args.seed)
    words = vocabulary(rng)
    items = make_items(rng, words, args.items)
    planted = [items[int(i)] for i in rng.choice(len(items), args.planted, replace=False)]
    folder = Path(tempfile.mkdtemp(prefix="bench-contamination-"))
    try:
        started = time.perf_counter()
        files = write_files(folder, make_records(rng, words, int(args.gb * 1e9), planted))
        print(f"generated {len(files)} files in {time.perf_counter() - started:.0f} s")

        started = time.perf_counter()
        index = contamination_index(items)
        index_s = time.perf_counter() - started
        started = time.perf_counter()
        hardcoded.hardcoded_index(items)
        code_index_s = time.perf_counter() - started
        print(
            f"index: {len(items)} items, contamination (8-grams) {index_s:.1f} s = "
            f"{len(items) / index_s:,.0f} items/s; hard-coded (5-grams) {code_index_s:.1f} s = "
            f"{len(items) / code_index_s:,.0f} items/s"
        )

        print(f"{'file':<28}{'MB on disk':>11}{'MB text':>9}{'scan s':>8}{'cpu s':>7}{'MB/s':>7}"
              f"{'ref s':>7}{'ref MB/s':>9}{'ratio':>7}{'found':>7}")  # fmt: skip
        totals = {"disk": 0, "text": 0, "scan": 0.0, "cpu": 0.0, "ref": 0.0, "records": 0}
        found: set[str] = set()
        for path in files:
            disk = path.stat().st_size
            text, ref_s = reference_read(path)
            started, cpu_started = time.perf_counter(), cpu_seconds()
            scan = scan_file(index, path)
            scan_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu_started
            assert not scan.skipped, scan.skipped
            hits = {m.item_id for m in scan.matches}
            found |= hits
            for key, value in (
                ("disk", disk), ("text", text), ("scan", scan_s), ("cpu", cpu_s), ("ref", ref_s)
            ):  # fmt: skip
                totals[key] += value
            totals["records"] += scan.records
            print(
                f"{path.relative_to(folder)!s:<28}{disk / 1e6:>11.0f}{text / 1e6:>9.0f}"
                f"{scan_s:>8.1f}{cpu_s:>7.1f}{disk / 1e6 / scan_s:>7.1f}{ref_s:>7.1f}"
                f"{disk / 1e6 / ref_s:>9.0f}{ref_s / scan_s:>7.3f}{len(hits):>7}"
            )
        print(
            f"scan: {totals['disk'] / 1e9:.2f} GB on disk ({totals['text'] / 1e9:.2f} GB of "
            f"content) in {totals['scan']:.0f} s = {totals['disk'] / 1e6 / totals['scan']:.1f} "
            f"MB/s on disk, {totals['text'] / 1e6 / totals['scan']:.1f} MB/s of content, "
            f"{totals['records'] / totals['scan']:,.0f} records/s; CPU {totals['cpu']:.0f} s "
            f"(the audit's and its columnar readers') = "
            f"{totals['text'] / 1e6 / totals['cpu']:.1f} MB of content per CPU second"
        )
        print(
            f"reference (read only, same files): {totals['ref']:.1f} s = "
            f"{totals['disk'] / 1e6 / totals['ref']:.0f} MB/s on disk; scan is "
            f"{totals['scan'] / totals['ref']:.0f}x slower than reading"
        )
        wanted = {i.item_id for i in planted}
        print(
            f"planted items found: {len(found & wanted)} of {len(wanted)}; "
            f"other items matched: {len(found - wanted)}"
        )
    finally:
        shutil.rmtree(folder)
        os.sync()


if __name__ == "__main__":
    main()
