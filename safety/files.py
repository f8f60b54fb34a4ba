"""Which files of a sandbox the audit reads, and how a file is cut into records.

Walked: everything under the sandbox except tool and package folders (`.git`, `.cache`,
virtual environments, `site-packages`, `node_modules`, `__pycache__`) and `~/.arena` (the
platform's own CLI and credentials, identical in every sandbox). Links are not followed, so a
sandbox cannot point the audit at somebody else's files.

- *Data files* (`.jsonl .json .txt .csv .tsv .md .parquet`, optionally `.gz`) are read for
  contamination and hashed for the cross-agent comparison.
- *Code files* (`.py .sh .ipynb .jinja .j2 .yaml .yml .toml .cfg`) are read for hard-coded
  evaluation items.
- A checkpoint's settings (`config.json`, `tokenizer_config.json`, `generation_config.json` …)
  are read like code.
- Tokenizer vocabularies (`tokenizer.json`, `vocab.json`, `merges.txt`) are neither: they hold
  no sentences, only pieces of words.

Records: a line of a line-oriented file (`.jsonl`, `.csv`, `.tsv`), with a JSON line reduced to
its string values so escapes (`\\n`, `\\u00e9`) do not glue words together; an element of a
`.json` file's top-level list (or of the longest list in a top-level object); a row of a
parquet file (its string columns); a paragraph (lines up to a blank line, at most
`MAX_RECORD_CHARS`) of anything else. Files larger than the limit are skipped and reported.

Every read goes through `cluster.sandbox_files`: no link below the walked root is followed, a
FIFO or device is never opened for reading, and no read is unbounded (a line is cut at
`MAX_RECORD_CHARS`, a compressed file stops at `MAX_TEXT_CHARS`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from cluster.sandbox_files import (
    SandboxPath,
    as_sandbox_path,
    file_sha256,
    open_file,
    read_text,
    walk_files,
)

__all__ = ["file_sha256"]  # the platform's one file hash, re-exported for the audit

DATA_SUFFIXES = {".jsonl", ".json", ".txt", ".csv", ".tsv", ".md", ".parquet"}
LINE_SUFFIXES = {".jsonl", ".csv", ".tsv"}
CODE_SUFFIXES = {".py", ".sh", ".ipynb", ".jinja", ".j2", ".yaml", ".yml", ".toml", ".cfg"}
VOCABULARY_FILES = {"tokenizer.json", "vocab.json", "merges.txt", "vocab.txt"}
# A checkpoint's settings: read like code (a chat template or generation config can hide an
# answer), not as training data.
CONFIG_FILES = {
    "config.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.json",
    "special_tokens_map.json",
    "trainer_state.json",
    "adapter_config.json",
}
SKIPPED_FOLDERS = {
    ".git",
    ".cache",
    ".venv",
    "venv",
    "env",
    "site-packages",
    "dist-packages",
    "node_modules",
    "__pycache__",
    ".arena",
    ".ipynb_checkpoints",
    ".triton",
    ".nv",
}

MAX_DATA_FILE_BYTES = 2 * 1024**3
MAX_CODE_FILE_BYTES = 2 * 1024**2
MAX_RECORD_CHARS = 20_000
MAX_JSON_PARSE_BYTES = 64 * 1024**2
MAX_TEXT_CHARS = 2 * MAX_DATA_FILE_BYTES  # what a compressed file may decompress to
HASH_MIN_BYTES = 4096  # smaller files are too often identical by chance (configs, READMEs)


@dataclass(frozen=True)
class Record:
    line: int  # 1-based line (or row / element number) where the record starts
    text: str


AuditPath = SandboxPath | Path  # a plain Path is trusted up to its folder


def _suffixes(path: AuditPath) -> tuple[str, bool]:
    """(the meaningful suffix, compressed?) — `train.jsonl.gz` is (".jsonl", True)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        return (suffixes[-2] if len(suffixes) > 1 else ""), True
    return (suffixes[-1] if suffixes else ""), False


def is_data_file(path: AuditPath) -> bool:
    name = path.name
    return (
        name not in VOCABULARY_FILES
        and name not in CONFIG_FILES
        and _suffixes(path)[0] in DATA_SUFFIXES
    )


def is_code_file(path: AuditPath) -> bool:
    return path.name in CONFIG_FILES or _suffixes(path)[0] in CODE_SUFFIXES


def walk(root: AuditPath) -> Iterator[SandboxPath]:
    """Regular files under `root` (a file is itself), skipping tool folders. Nothing below
    the root is followed: links, FIFOs and devices are left out, whatever they point to."""
    where = as_sandbox_path(root)
    try:
        info = where.stat()
    except OSError:  # gone, or behind a link
        return
    if stat.S_ISREG(info.st_mode):
        yield where
    elif stat.S_ISDIR(info.st_mode):
        yield from walk_files(where, skip_folders=frozenset(SKIPPED_FOLDERS))


@contextlib.contextmanager
def _open_text(path: AuditPath) -> Iterator[TextIO]:
    with open_file(path) as raw:
        stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if _suffixes(path)[1] else raw  # type: ignore[assignment]
        yield io.TextIOWrapper(stream, encoding="utf-8", errors="replace")


def _lines(source: TextIO) -> Iterator[str]:
    """The lines of `source`, each cut at MAX_RECORD_CHARS (a file that is one line of a
    gigabyte is read in pieces, not held whole), and no more than MAX_TEXT_CHARS in all (a
    small .gz can decompress to a terabyte)."""
    total = 0
    while line := source.readline(MAX_RECORD_CHARS):
        total += len(line)
        while not line.endswith("\n") and (rest := source.readline(MAX_RECORD_CHARS)):
            total += len(rest)  # the rest of an overlong line, dropped
            if total > MAX_TEXT_CHARS:
                break
            if rest.endswith("\n"):
                break
        if total > MAX_TEXT_CHARS:
            raise ValueError(f"more than {MAX_TEXT_CHARS} characters of text")
        yield line


def text_lines(path: AuditPath) -> Iterator[str]:
    """The file's lines, bounded as `_lines` bounds them."""
    with _open_text(path) as source:
        yield from _lines(source)


def records(path: AuditPath) -> Iterator[Record]:
    suffix, compressed = _suffixes(path)
    if suffix == ".parquet":
        yield from _parquet_records(path)
    elif suffix in LINE_SUFFIXES:
        yield from _line_records(path, as_json=suffix == ".jsonl")
    elif suffix == ".json" and (compressed or path.stat().st_size <= MAX_JSON_PARSE_BYTES):
        yield from _json_records(path)
    else:
        yield from _paragraph_records(path)


def _line_records(path: AuditPath, *, as_json: bool) -> Iterator[Record]:
    with _open_text(path) as source:
        for number, line in enumerate(_lines(source), start=1):
            if as_json:
                with contextlib.suppress(ValueError):
                    line = "\n".join(_strings(json.loads(line)))
            if line.strip():
                yield Record(number, line[:MAX_RECORD_CHARS])


def _json_records(path: AuditPath) -> Iterator[Record]:
    with _open_text(path) as source:
        text = source.read(MAX_JSON_PARSE_BYTES + 1)
    try:
        if len(text) > MAX_JSON_PARSE_BYTES:
            raise ValueError("too large to parse whole")
        data = json.loads(text)
    except ValueError:
        yield from _paragraph_records(path)
        return
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        data = max(lists, key=len) if lists else [data]
    if not isinstance(data, list):
        data = [data]
    for number, element in enumerate(data, start=1):
        text = "\n".join(_strings(element))
        if text.strip():
            yield Record(number, text[:MAX_RECORD_CHARS])


def _paragraph_records(path: AuditPath) -> Iterator[Record]:
    with _open_text(path) as source:
        start, size = 1, 0
        buffer: list[str] = []
        for number, line in enumerate(_lines(source), start=1):
            if not line.strip() or size + len(line) > MAX_RECORD_CHARS:
                if buffer:
                    yield Record(start, "".join(buffer))
                buffer, size = [], 0
            if line.strip():
                if not buffer:
                    start = number
                buffer.append(line[:MAX_RECORD_CHARS])
                size += len(buffer[-1])
        if buffer:
            yield Record(start, "".join(buffer))


def _parquet_records(path: AuditPath) -> Iterator[Record]:
    import pyarrow.parquet as pq

    number = 0
    with open_file(path) as data:
        for batch in pq.ParquetFile(data).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                number += 1
                text = "\n".join(_strings(row))
                if text.strip():
                    yield Record(number, text[:MAX_RECORD_CHARS])


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, in order (keys too: a prompt can be a key)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def read_code(path: AuditPath) -> str:
    """The text of a code or config file; a JSON file as its strings (a template stored in
    JSON has its escapes decoded), a notebook as its cells. Raises UnsafePath for a link, a
    special file or a file over MAX_CODE_FILE_BYTES."""
    text = read_text(path, max_bytes=MAX_CODE_FILE_BYTES)
    if path.suffix == ".json":
        try:
            return "\n".join(_strings(json.loads(text)))
        except ValueError:
            pass
    if path.suffix == ".ipynb":
        try:
            notebook = json.loads(text)
            return "\n".join(_strings(notebook.get("cells", [])))
        except (ValueError, AttributeError):
            pass
    return text
