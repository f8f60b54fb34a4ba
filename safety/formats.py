"""The formats an agent can keep data in, read without trusting the file.

- **Compressed text** (`.gz`, `.bz2`, `.xz`, `.zst`): decompressed as a stream, a bounded piece
  at a time, and stopped once it has produced more than `decompression_cap(size)` bytes — at
  most `MAX_DECOMPRESSED_BYTES`, and at most `MAX_EXPANSION` times the file's own size past the
  first `EXPANSION_FLOOR_BYTES` (text compresses about 5–20×; a bomb, thousands). A decoder's own
  memory is bounded too (`xz` dictionary, `zstd` window).
- **Columnar files** (Parquet; Arrow IPC, file or stream: `datasets.save_to_disk` shards and the
  `datasets` cache) are parsed in a child process (`safety.columnar`) that gets the descriptor
  the platform opened (no link followed), runs under memory and CPU limits, as `nobody` when
  the audit is root, and sends back each row's strings. A crafted file that makes pyarrow fail,
  allocate without end or crash costs that child, never the audit.
- **Files named by their hash** (a Hugging Face hub cache's `blobs/`, the `datasets` cache's
  `downloads/`, or any file whose name says nothing) are recognised by their first bytes.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from cluster.sandbox_files import SandboxPath, open_file
from safety.budget import Budget

MAX_DECOMPRESSED_BYTES = 8 * 1024**3
MAX_EXPANSION = 200
EXPANSION_FLOOR_BYTES = 64 * 1024**2
XZ_MEMORY_LIMIT = 256 * 1024**2
ZSTD_MAX_WINDOW = 1 << 27  # zstd's own default limit: 128 MiB
BLOCK = 1 << 16

COMPRESSIONS = {".gz": "gz", ".bz2": "bz2", ".xz": "xz", ".zst": "zst"}
COLUMNAR = {".parquet", ".arrow", ".feather"}

# Limits of the child that parses a columnar file.
COLUMNAR_MEMORY_BYTES = 6 * 1024**3
COLUMNAR_CPU_SECONDS = 900
MAX_FRAME_BYTES = 4 * 20_000 + 64  # a record of MAX_RECORD_CHARS characters, UTF-8
_FRAME = struct.Struct("<QI")  # row number, length of the UTF-8 text that follows


class Unreadable(ValueError):
    """The file is not what it says, or not readable within the platform's bounds."""


class DecompressionBomb(Unreadable):
    pass


# --- recognising a file ----------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """How to read a file: `kind` is the suffix it is read as (".jsonl", ".parquet", …), and
    `compression` the codec it is wrapped in ("" for none)."""

    kind: str
    compression: str = ""


_MAGIC: tuple[tuple[bytes, Format], ...] = (
    (b"PAR1", Format(".parquet")),
    (b"ARROW1", Format(".arrow")),
    (b"\xff\xff\xff\xff", Format(".arrow")),  # an IPC stream: a continuation marker first
    (b"\x1f\x8b", Format(".jsonl", "gz")),
    (b"BZh", Format(".jsonl", "bz2")),
    (b"\xfd7zXZ\x00", Format(".jsonl", "xz")),
    (b"\x28\xb5\x2f\xfd", Format(".jsonl", "zst")),
)


def name_format(name: str) -> Format:
    """What a file's name says: `train.jsonl.zst` is (".jsonl", "zst")."""
    suffixes = [s.lower() for s in Path(name).suffixes]
    compression = ""
    if suffixes and suffixes[-1] in COMPRESSIONS:
        compression = COMPRESSIONS[suffixes.pop()]
    return Format(suffixes[-1] if suffixes else "", compression)


def sniff(path: SandboxPath | Path, *, text_too: bool) -> Format | None:
    """The format the file's first bytes show; with `text_too`, UTF-8 text without NUL bytes
    counts as JSON lines (or a JSON document when it opens with `[`). None: not data we read."""
    try:
        with open_file(path) as data:
            head = data.read(4096)
    except OSError:
        return None
    for magic, found in _MAGIC:
        if head.startswith(magic):
            return found
    if not text_too or not head.strip() or b"\x00" in head:
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the 4096th byte
            return None
    return Format(".json" if head.lstrip().startswith(b"[") else ".jsonl")


# --- compressed streams ----------------------------------------------------------------------


def decompression_cap(compressed_bytes: int) -> int:
    return min(MAX_DECOMPRESSED_BYTES, max(EXPANSION_FLOOR_BYTES, MAX_EXPANSION * compressed_bytes))


class _Capped(io.RawIOBase):
    """`stream`'s bytes, raising DecompressionBomb once more than `cap` came out."""

    def __init__(self, stream: BinaryIO, cap: int, compressed_bytes: int) -> None:
        self._stream = stream
        self._cap = cap
        self._compressed = compressed_bytes
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._stream.read(min(len(buffer), BLOCK))
        self.produced += len(chunk)
        if self.produced > self._cap:
            raise DecompressionBomb(
                f"decompresses to more than {self._cap} bytes from {self._compressed}: "
                "stopped there (a decompression bomb, or data too large to audit)"
            )
        buffer[: len(chunk)] = chunk
        return len(chunk)


class _StreamDecompressor(Protocol):
    eof: bool
    needs_input: bool
    unused_data: bytes

    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...


class _Inflating(io.RawIOBase):
    """A bz2 or xz stream decompressed at most `len(buffer)` bytes per read, however much one
    input block expands to; concatenated streams are read one after the other."""

    def __init__(self, raw: BinaryIO, new: Callable[[], _StreamDecompressor]) -> None:
        self._raw = raw
        self._new = new
        self._decompressor = new()
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = min(len(buffer), BLOCK)
        while not self._done:
            if self._decompressor.eof:
                block = self._decompressor.unused_data or self._raw.read(BLOCK)
                if not block:
                    self._done = True
                    break
                self._decompressor = self._new()
            elif self._decompressor.needs_input:
                block = self._raw.read(BLOCK)
                if not block:
                    raise EOFError("the compressed stream ends before its end marker")
            else:
                block = b""
            try:
                out = self._decompressor.decompress(block, size)
            except (OSError, lzma.LZMAError) as exc:
                raise Unreadable(f"not a valid compressed stream ({exc})") from None
            if out:
                buffer[: len(out)] = out
                return len(out)
        return 0


def decompressed(raw: BinaryIO, compression: str, *, compressed_bytes: int) -> BinaryIO:
    """`raw` (a file the platform opened) decompressed, bounded as the module says."""
    stream: BinaryIO
    if compression == "gz":
        stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]  # reads are bounded by their size
    elif compression == "bz2":
        stream = _Inflating(raw, bz2.BZ2Decompressor)  # type: ignore[arg-type, assignment]  # typeshed: read-only decompressor properties
    elif compression == "xz":
        stream = _Inflating(raw, lambda: lzma.LZMADecompressor(memlimit=XZ_MEMORY_LIMIT))  # type: ignore[arg-type, assignment, return-value]  # typeshed: as above
    elif compression == "zst":
        import zstandard

        stream = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
            raw, read_across_frames=True, closefd=False
        )
    else:
        raise ValueError(f"unknown compression {compression!r}")
    cap = decompression_cap(compressed_bytes)
    return io.BufferedReader(_Capped(stream, cap, compressed_bytes), buffer_size=BLOCK)  # type: ignore[arg-type]


# --- columnar files, parsed in a child ------------------------------------------------------


def columnar_rows(
    path: SandboxPath | Path, kind: str, *, budget: Budget | None = None
) -> Iterator[tuple[int, str]]:
    """(row number, the row's strings joined by newlines) for each row of a Parquet or Arrow
    file with text in it, parsed by `safety.columnar` in a bounded child. Raises Unreadable
    when the child could not read the file to its end (the rows before that are yielded).
    The text sent back is charged to `budget`, and the child is killed at its deadline
    (BudgetSpent then, not Unreadable)."""
    if budget is not None:
        budget.check()
    with open_file(path) as data, tempfile.TemporaryFile() as errors:
        fd = data.fileno()
        child = subprocess.Popen(
            [sys.executable, "-m", "safety.columnar", kind, str(fd)],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            cwd=Path(__file__).resolve().parents[1],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "ARENA_COLUMNAR_MEMORY_BYTES": str(COLUMNAR_MEMORY_BYTES),
                "ARENA_COLUMNAR_CPU_SECONDS": str(COLUMNAR_CPU_SECONDS),
                "OMP_NUM_THREADS": "1",
            },
        )
        data.close()  # the child holds its own copy of the descriptor
        assert child.stdout is not None
        stop = None
        if budget is not None:
            stop = threading.Timer(max(0.0, budget.deadline - time.monotonic()), child.kill)
            stop.daemon = True
            stop.start()
        try:
            for number, text in _frames(child.stdout):  # type: ignore[arg-type]  # a pipe is a binary stream
                if budget is not None:
                    budget.read(_FRAME.size + len(text))
                yield number, text
            code = child.wait()
        except Unreadable:
            if budget is not None:
                budget.check()  # cut short by the deadline: the budget, not the file
            raise
        finally:
            if stop is not None:
                stop.cancel()
            if child.poll() is None:
                child.kill()
                child.wait()
        if code != 0 and budget is not None:
            budget.check()
        if code != 0:
            errors.seek(0)
            said = errors.read(4096).decode("utf-8", "replace").strip().splitlines()
            reason = said[-1] if said else f"the reader stopped with status {code}"
            raise Unreadable(f"not a readable {kind[1:]} file: {reason}"[:500])


def _frames(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    while header := stream.read(_FRAME.size):
        if len(header) < _FRAME.size:
            raise Unreadable("the reader's output was cut short")
        number, length = _FRAME.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise Unreadable("the reader sent a record over the bound")
        body = stream.read(length)
        if len(body) < length:
            raise Unreadable("the reader's output was cut short")
        yield number, body.decode("utf-8", "replace")


def write_frame(out: BinaryIO, number: int, text: str) -> None:
    body = text.encode("utf-8", "replace")
    out.write(_FRAME.pack(number, len(body)))
    out.write(body)
