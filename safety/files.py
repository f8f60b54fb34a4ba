"""Which files of a sandbox the audit reads, and how a file is cut into records.

Walked: everything under the sandbox except tool and package folders (`.git`, `.cache`,
virtual environments, `site-packages`, `node_modules`, `__pycache__`) and `~/.arena` (the
platform's own CLI and credentials, identical in every sandbox) — but a `.cache/huggingface`
folder *is* walked: a hub cache (`hub/datasets--org--name/...`) or a `datasets` Arrow cache is
where a downloaded test set lives. Links are not followed, so a sandbox cannot point the audit
at somebody else's files (a hub cache's `snapshots/` are links: their `blobs/` are read).

- *Data files* (`.jsonl .json .txt .csv .tsv .md .parquet .arrow .feather`, optionally
  compressed: `.gz .bz2 .xz .zst`) are read for contamination and hashed for the cross-agent
  comparison. A file whose name says nothing (a hub `blobs/` entry, a `datasets` download, a
  renamed shard) is recognised by its first bytes (`safety.formats.sniff`).
- *Code files* (`.py .sh .ipynb .jinja .j2 .yaml .yml .toml .cfg`) are read for hard-coded
  evaluation items.
- A checkpoint's settings (`config.json`, `tokenizer_config.json`, `generation_config.json` …)
  are read like code.
- Tokenizer vocabularies (`tokenizer.json`, `vocab.json`, `merges.txt`) are neither: they hold
  no sentences, only pieces of words.

Records: a line of a line-oriented file (`.jsonl`, `.csv`, `.tsv`), with a JSON line reduced to
its string values so escapes (`\\n`, `\\u00e9`) do not glue words together; an element of a
`.json` document's lists reached from the top through objects (streamed: `json_document_records`);
a row of a Parquet or Arrow file (its text and UTF-8 binary columns, parsed in a bounded child:
`safety.columnar`); a
paragraph (lines up to a blank line, at most `MAX_RECORD_CHARS`) of anything else. Files larger
than the limit are skipped and reported.

Every read goes through `cluster.sandbox_files`: no link below the walked root is followed, a
FIFO or device is never opened for reading, and no read is unbounded (a line is cut at
`MAX_RECORD_CHARS`, a compressed file stops at `safety.formats.decompression_cap`), and each
read is charged to the agent's `safety.budget.Budget` when the audit passes one.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import posixpath
import stat
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, TextIO

import ijson

from cluster.sandbox_files import (
    SandboxPath,
    as_sandbox_path,
    file_sha256,
    open_file,
    read_link,
    read_text,
)
from cluster.sandbox_files import walk as walk_entries
from safety import formats
from safety.budget import Budget, metered
from safety.formats import Format

__all__ = ["file_sha256"]  # the platform's one file hash, re-exported for the audit

DATA_SUFFIXES = {".jsonl", ".json", ".txt", ".csv", ".tsv", ".md", *formats.COLUMNAR}
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
# A JSON document is streamed by its parser up to this much content; a larger one is read as
# paragraphs of text (the parser holds each string whole).
JSON_STREAM_MAX_BYTES = 64 * 1024**2
MAX_SETTINGS_JSON_BYTES = 64 * 1024**2  # a checkpoint's trainer_state.json, streamed
MAX_BINARY_TEXT_BYTES = 4 * MAX_RECORD_CHARS  # of one binary value: a record's worth of UTF-8
MAX_TEXT_CHARS = 2 * MAX_DATA_FILE_BYTES  # a plain file's text; compressed: decompression_cap
MAX_READ_SECONDS = 1800  # one file's reading, scan included (2 GiB at about 1.2 MB/s)
CHUNK_CHARS = 1 << 20
# Names that say "weights or tokens, no text": never sniffed (they are still hashed).
BINARY_SUFFIXES = {
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".npy", ".npz", ".gguf", ".onnx", ".h5",
    ".msgpack", ".idx", ".so", ".whl", ".png", ".jpg", ".jpeg", ".lock", ".incomplete",
}  # fmt: skip
# A Hugging Face cache names files by their hash: there the first bytes say what a file holds.
HASH_NAMED_FOLDERS = {"blobs", "downloads"}
HUB_REPO_PREFIXES = ("datasets--", "models--", "spaces--")
MAX_SNAPSHOT_ENTRIES = 10_000
HASH_MIN_BYTES = 4096  # smaller files are too often identical by chance (configs, READMEs)


@dataclass(frozen=True)
class Record:
    line: int  # 1-based line (or row / element number) where the record starts
    text: str


AuditPath = SandboxPath | Path  # a plain Path is trusted up to its folder


def data_format(path: AuditPath) -> Format | None:
    """How the audit reads `path` as data, or None if it is not data: by its name, else (for
    a name that says nothing) by its first bytes."""
    name = path.name
    if name in VOCABULARY_FILES or name in CONFIG_FILES:
        return None
    found = formats.name_format(name)
    if found.kind in DATA_SUFFIXES:
        return found
    if found.kind in CODE_SUFFIXES or found.kind in BINARY_SUFFIXES:
        return None
    hash_named = path.parent.name in HASH_NAMED_FOLDERS
    if found.kind and not hash_named:
        # A suffix we do not read (`.log`, `.log.gz`, `.tar`) is left alone (an agent's own
        # evaluation logs quote benchmark prompts), unless its bytes are a Parquet or Arrow
        # table: a test set renamed `.dat` is still a test set.
        sniffed = formats.sniff(path, text_too=False)
        return sniffed if sniffed is not None and sniffed.kind in formats.COLUMNAR else None
    return formats.sniff(path, text_too=hash_named)  # no suffix (`train`, `train.gz`), a blob


def is_data_file(path: AuditPath) -> bool:
    return data_format(path) is not None


def in_hub_cache(path: str) -> bool:
    """Whether `path` lies in a Hugging Face cache: a hub repository's folder
    (`datasets--org--name`, `models--…`) or `.cache/huggingface`. What all its holders keep
    there was downloaded, not taken from another participant."""
    parts = PurePosixPath(path).parts
    return any(part.startswith(HUB_REPO_PREFIXES) for part in parts) or any(
        a == ".cache" and b == "huggingface" for a, b in itertools.pairwise(parts)
    )


def hub_snapshot_names(blob: SandboxPath) -> list[str]:
    """For a blob of a hub cache repository (`datasets--org--name/blobs/<hash>`), the files of
    its snapshots that name it (`snapshots/<revision>/<file>`, links read, never followed):
    what the blob is called on the hub. [] for any other file."""
    folder = blob.parent
    if folder.name != "blobs" or not folder.parent.name.startswith(HUB_REPO_PREFIXES):
        return []
    repo = folder.parent
    names = []
    with contextlib.suppress(OSError):  # no snapshots, too many entries, a folder moved
        for entry in walk_entries(repo / "snapshots", max_entries=MAX_SNAPSHOT_ENTRIES):
            if not stat.S_ISLNK(entry.info.st_mode):
                continue
            target = read_link(entry.where)
            named = posixpath.normpath(posixpath.join(entry.where.relative.parent, target))
            if named == str(blob.relative):
                names.append(str(entry.where.relative.relative_to(repo.relative)))
    return sorted(names)


def is_code_file(path: AuditPath) -> bool:
    return path.name in CONFIG_FILES or formats.name_format(path.name).kind in CODE_SUFFIXES


def walk(root: AuditPath, budget: Budget | None = None) -> Iterator[SandboxPath]:
    """Regular files under `root` (a file is itself), skipping tool folders. Nothing below
    the root is followed: links, FIFOs and devices are left out, whatever they point to.
    Each entry walked is charged to `budget` (BudgetSpent once it is spent)."""
    where = as_sandbox_path(root)
    if budget is not None:
        budget.entry(where)
    try:
        info = where.stat()
    except OSError:  # gone, or behind a link
        return
    if stat.S_ISREG(info.st_mode):
        yield where
    elif stat.S_ISDIR(info.st_mode):
        yield from _walk_folder(where, budget)


def _walk_folder(where: SandboxPath, budget: Budget | None) -> Iterator[SandboxPath]:
    for entry in walk_entries(where, skip_folders=frozenset(SKIPPED_FOLDERS)):
        if budget is not None:
            budget.entry(entry.where)
        if entry.is_file:
            yield entry.where
        elif entry.is_folder and entry.where.name == ".cache":
            cache = entry.where / "huggingface"
            with contextlib.suppress(OSError):  # none, or a link (not followed)
                if stat.S_ISDIR(cache.stat().st_mode):
                    yield from _walk_folder(cache, budget)


@contextlib.contextmanager
def _open_bytes(path: AuditPath, found: Format, budget: Budget | None) -> Iterator[BinaryIO]:
    """The file's content, decompressed, each block charged to `budget`."""
    with open_file(path) as raw:
        if found.compression:
            size = os.fstat(raw.fileno()).st_size
            stream = formats.decompressed(raw, found.compression, compressed_bytes=size)
            yield metered(stream, budget)
        else:
            yield metered(raw, budget)


@contextlib.contextmanager
def _open_text(
    path: AuditPath, found: Format | None = None, budget: Budget | None = None
) -> Iterator[TextIO]:
    found = found or data_format(path) or formats.name_format(path.name)
    with _open_bytes(path, found, budget) as stream:
        yield io.TextIOWrapper(stream, encoding="utf-8", errors="replace")


def _numbered_lines(source: TextIO) -> Iterator[tuple[int, str]]:
    """(1-based number, line ending in a newline) for each non-blank line of `source`, read in
    chunks: a line longer than MAX_RECORD_CHARS comes in pieces of that size, each with the
    line's number (a file that is one line of a gigabyte is read whole, in pieces, never held
    whole; text after a long prefix is read like any other), a run of blank lines costs no
    Python step per line, and reading stops past MAX_TEXT_CHARS characters or
    MAX_READ_SECONDS."""
    deadline = time.monotonic() + MAX_READ_SECONDS
    number = 1  # the number of the line `partial` belongs to
    partial = ""  # the start of a line the next chunk continues, under MAX_RECORD_CHARS
    total = 0
    while chunk := source.read(CHUNK_CHARS):
        total += len(chunk)
        if total > MAX_TEXT_CHARS:
            raise formats.Unreadable(f"more than {MAX_TEXT_CHARS} characters of text")
        if time.monotonic() > deadline:
            raise formats.Unreadable(f"still being read after {MAX_READ_SECONDS} s")
        if chunk.isspace() and not partial.strip():  # blank lines only: counted, not split
            newlines = chunk.count("\n")
            number += newlines
            partial = partial if not newlines else chunk[chunk.rindex("\n") + 1 :]
            continue
        parts = chunk.split("\n")
        if len(parts) == 1:
            partial = yield from _long_line_pieces(number, partial + chunk)
            continue
        rest = yield from _long_line_pieces(number, partial + parts[0])
        if rest.strip():
            yield number, rest + "\n"
        for index in itertools.compress(range(1, len(parts) - 1), parts[1:-1]):
            text = parts[index]
            if not text.isspace():
                rest = yield from _long_line_pieces(number + index, text)
                if rest.strip():
                    yield number + index, rest + "\n"
        number += len(parts) - 1
        partial = yield from _long_line_pieces(number, parts[-1])
    if partial.strip():
        yield number, partial


def _long_line_pieces(number: int, text: str) -> Generator[tuple[int, str], None, str]:
    """Yield `text`'s whole MAX_RECORD_CHARS pieces as line `number`; return what is left."""
    whole = len(text) - len(text) % MAX_RECORD_CHARS
    for start in range(0, whole, MAX_RECORD_CHARS):
        piece = text[start : start + MAX_RECORD_CHARS]
        if piece.strip():
            yield number, piece
    return text[whole:]


def text_lines(path: AuditPath) -> Iterator[str]:
    """The file's lines (blank ones too), bounded as `_numbered_lines` bounds them."""
    with _open_text(path) as source:
        expected = 1
        for number, line in _numbered_lines(source):
            yield from ("\n" for _ in range(number - expected))
            yield line
            expected = number + 1


def records(path: AuditPath, budget: Budget | None = None) -> Iterator[Record]:
    """The file's records; what is read is charged to `budget` (BudgetSpent once spent)."""
    found = data_format(path) or formats.name_format(path.name)
    if found.kind in formats.COLUMNAR:
        if found.compression:
            raise formats.Unreadable(f"a compressed {found.kind[1:]} file is not read")
        for number, text in formats.columnar_rows(path, found.kind, budget=budget):
            yield Record(number, text)
    elif found.kind in LINE_SUFFIXES:
        yield from _line_records(path, found, budget, as_json=found.kind == ".jsonl")
    elif found.kind == ".json":
        yield from _json_records(path, found, budget)
    else:
        yield from _paragraph_records(path, found, budget)


def _line_records(
    path: AuditPath, found: Format, budget: Budget | None, *, as_json: bool
) -> Iterator[Record]:
    with _open_text(path, found, budget) as source:
        for number, line in _numbered_lines(source):
            if as_json:
                # Not JSON, or nested past the parser's recursion limit: scanned as text.
                with contextlib.suppress(ValueError, RecursionError):
                    line = "\n".join(string_values(json.loads(line)))
            if line.strip():
                yield Record(number, line[:MAX_RECORD_CHARS])


def _json_records(path: AuditPath, found: Format, budget: Budget | None) -> Iterator[Record]:
    """A JSON document streamed (ijson), never parsed whole: `[{},{},…]` would cost 24 times
    its size. A file that turns out not to be JSON is read again as paragraphs, and so is one
    whose content may be larger than JSON_STREAM_MAX_BYTES: the parser holds each string
    whole, and one string of two gigabytes would be held, and cut, at once."""
    with open_file(path) as raw:
        size = os.fstat(raw.fileno()).st_size
    content = formats.decompression_cap(size) if found.compression else size
    if content > JSON_STREAM_MAX_BYTES:
        yield from _paragraph_records(path, found, budget)
        return
    try:
        with _open_bytes(path, found, budget) as source:
            yield from json_document_records(source)
    except (ijson.JSONError, UnicodeDecodeError):
        yield from _paragraph_records(path, found, budget)


def json_document_records(source: BinaryIO) -> Iterator[Record]:
    """Records of a JSON document (or of several, one after the other), read as a stream of
    parser events: each element of a list reached from the top through objects only (the
    top-level list, `{"data": [...]}`, every such list) is a record, numbered from 1 in
    document order, of its strings (keys too) and numbers joined by newlines; the strings
    outside those lists make records of their own. A record longer than MAX_RECORD_CHARS
    goes on in the next record, with the same number: memory holds one record at a time."""
    outside: list[str] = []  # per open container outside records: "m" an object, "l" a list
    depth = 0  # containers open inside the current record (0: not in a record)
    number = 0
    parts: list[str] = []
    size = 0
    loose: list[str] = []  # strings outside records, gathered until a record's worth
    loose_size = 0
    events = ijson.basic_parse(source, use_float=True, multiple_values=True)
    for event, value in events:
        if depth:
            if event == "string" or event == "map_key":
                parts.append(value)
                size += len(value) + 1
            elif event == "number":
                parts.append(str(value))
                size += len(parts[-1]) + 1
            elif event == "start_map" or event == "start_array":
                depth += 1
            elif event == "end_map" or event == "end_array":
                depth -= 1
                if not depth:
                    yield from _records_of(number, parts)
                    parts, size = [], 0
            if size > MAX_RECORD_CHARS:
                pieces, rest = _record_pieces(number, parts)
                yield from pieces
                parts, size = [rest], len(rest)
            continue
        if outside and outside[-1] == "l" and event != "end_array":  # an element: a record
            number += 1
            if event == "start_map" or event == "start_array":
                depth = 1
            elif (text := _scalar_text(event, value)) is not None:
                yield from _records_of(number, [text])
            continue
        if event == "start_map":
            outside.append("m")
        elif event == "start_array":
            outside.append("l")
        elif event == "end_map" or event == "end_array":
            outside.pop()
        elif (text := _scalar_text(event, value)) is not None:
            loose.append(text)
            loose_size += len(text) + 1
        if loose and (not outside or loose_size > MAX_RECORD_CHARS):
            number += 1
            yield from _records_of(number, loose)
            loose, loose_size = [], 0


def _scalar_text(event: str, value: Any) -> str | None:
    if event == "string" or event == "map_key":
        return value  # type: ignore[no-any-return]
    if event == "number":
        return str(value)
    return None  # true, false, null: no text


def _record_pieces(number: int, parts: list[str]) -> tuple[list[Record], str]:
    """Records of MAX_RECORD_CHARS cut from `parts` joined, and the rest."""
    text = "\n".join(parts)
    pieces = []
    # By index, in one pass: cutting the front off the rest each time copied it each time.
    whole = len(text) - len(text) % MAX_RECORD_CHARS
    if whole == len(text):
        whole -= MAX_RECORD_CHARS if text else 0
    for start in range(0, whole, MAX_RECORD_CHARS):
        piece = text[start : start + MAX_RECORD_CHARS]
        if piece.strip():
            pieces.append(Record(number, piece))
    return pieces, text[whole:]


def _records_of(number: int, parts: list[str]) -> list[Record]:
    pieces, rest = _record_pieces(number, parts)
    return [*pieces, Record(number, rest)] if rest.strip() else pieces


def _paragraph_records(path: AuditPath, found: Format, budget: Budget | None) -> Iterator[Record]:
    with _open_text(path, found, budget) as source:
        start, size, previous = 1, 0, 0
        buffer: list[str] = []
        for number, line in _numbered_lines(source):
            if number != previous + 1 or size + len(line) > MAX_RECORD_CHARS:  # a blank line
                if buffer:
                    yield Record(start, "".join(buffer))
                buffer, size = [], 0
            if not buffer:
                start = number
            buffer.append(line)
            size += len(line)
            previous = number
        if buffer:
            yield Record(start, "".join(buffer))


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, in order (keys too: a prompt can be a key)."""
    return iter(string_values(value))


def string_values(value: Any) -> list[str]:
    """`strings(value)` as a list, walked with a stack of its own: a value nested deeper than
    Python's recursion limit costs memory, not a RecursionError, and the common record (a few
    dicts of strings) costs one loop step per value instead of a generator per level."""
    found: list[str] = []
    pending = [value]  # what is still to walk, the next value last
    while pending:
        value = pending.pop()
        kind = type(value)
        if kind is str:
            found.append(value)
        elif kind is dict:
            for key, inner in reversed(value.items()):
                pending.append(inner)
                pending.append(str(key))
        elif kind is list:
            pending.extend(reversed(value))
        elif kind is bytes:  # a binary column's value: text if it is UTF-8
            if text := utf8_text(value):
                found.append(text)
        elif isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):  # a subclass: walked as the plain value it holds
            pending.append(dict(value))
        elif isinstance(value, list):
            pending.append(list(value))
        elif value is not None and not isinstance(value, bool):
            found.append(str(value))
    return found


def json_top_level_number(path: AuditPath, key: str) -> int | float | None:
    """The number under `key` at the top of a JSON object (`trainer_state.json`'s
    `global_step`), streamed: the rest of the document (a log history of any shape) is
    never built. None when it is not there, or the file is over MAX_SETTINGS_JSON_BYTES.
    Raises OSError for a link or special file, ijson.JSONError for a file that is no JSON."""
    with open_file(path) as raw:
        if os.fstat(raw.fileno()).st_size > MAX_SETTINGS_JSON_BYTES:
            return None
        for prefix, event, value in ijson.parse(raw, use_float=True):
            if prefix == key and event == "number":
                return value  # type: ignore[no-any-return]
    return None


def utf8_text(data: bytes) -> str:
    """The text of a binary value that holds UTF-8: its first MAX_BINARY_TEXT_BYTES decoded (a
    character cut there dropped). "" for bytes that are no text (an image, packed numbers):
    invalid UTF-8, or a NUL byte."""
    head = data[:MAX_BINARY_TEXT_BYTES]
    if b"\0" in head:
        return ""
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(data) > len(head) and exc.reason == "unexpected end of data":
            return head[: exc.start].decode("utf-8")
        return ""


def read_code(path: AuditPath) -> str:
    """The text of a code or config file; a JSON file as its strings (a template stored in
    JSON has its escapes decoded), a notebook as its cells. Raises UnsafePath for a link, a
    special file or a file over MAX_CODE_FILE_BYTES."""
    text = read_text(path, max_bytes=MAX_CODE_FILE_BYTES)
    if path.suffix == ".json":
        try:
            return "\n".join(strings(json.loads(text)))
        except (ValueError, RecursionError):
            pass
    if path.suffix == ".ipynb":
        try:
            notebook = json.loads(text)
            return "\n".join(strings(notebook.get("cells", [])))
        except (ValueError, AttributeError, RecursionError):
            pass
    return text
