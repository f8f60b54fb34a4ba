"""The child that parses one Parquet or Arrow file for the audit (see `safety.formats`).

    python -m safety.columnar .parquet|.arrow FD

It reads the already-open descriptor FD (the parent opened it without following links), sets
its own memory, CPU and file-size limits, gives up root for `nobody` once pyarrow is loaded,
and writes one frame per row with text in it: `<QI` (row number, byte length) and the row's
strings, UTF-8, joined by newlines. Only columns that hold text are read (token ids and other
numbers hold no sentences); binary columns count as text, since benchmark text is as easily
kept as UTF-8 bytes: each binary value is cut to `MAX_BINARY_TEXT_BYTES` in Arrow, before
Python sees it (an image column costs its first bytes, not its pixels), and read when those
bytes are UTF-8 text (`safety.files.utf8_text`). Any failure is one line on stderr and exit status 2; a crash is the
parent's "unreadable", never the audit's end. No Django here.
"""

from __future__ import annotations

import os
import pwd
import resource
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from safety.files import MAX_BINARY_TEXT_BYTES, MAX_RECORD_CHARS, strings
from safety.formats import write_frame

MAX_ROW_GROUP_BYTES = 2 * 1024**3
BATCH_ROWS = 1024


def main(argv: list[str]) -> int:
    kind, fd = argv[1], int(argv[2])
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401 - loaded while its files can still be read
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        pa.set_cpu_count(1)
        pa.set_io_thread_count(1)
        _limit_self()
        _give_up_root()
        out = sys.stdout.buffer
        number = 0
        with os.fdopen(fd, "rb") as source:
            for batch in _text_batches(source, kind):
                batch.validate(full=True)  # offsets and UTF-8 checked before a value is read
                for row in _binary_cut(batch).to_pylist():
                    number += 1
                    text = "\n".join(strings(row))[:MAX_RECORD_CHARS]
                    if text.strip():
                        write_frame(out, number, text)
        out.flush()
    except BaseException as exc:  # noqa: BLE001 - everything is reported, nothing escapes
        sys.stderr.write(f"{type(exc).__name__}: {str(exc)[:300]}\n")
        return 2
    return 0


def _limit_self() -> None:
    memory = int(os.environ.get("ARENA_COLUMNAR_MEMORY_BYTES", 6 * 1024**3))
    seconds = int(os.environ.get("ARENA_COLUMNAR_CPU_SECONDS", 900))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
    # It writes no file but its one-line report (stderr is a file of the parent's).
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _give_up_root() -> None:
    if os.geteuid() != 0:
        return
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
    os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)


def _is_binary(kind: Any) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_fixed_size_binary(kind)
    )


def _is_string(kind: Any) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _holds(kind: Any, leaf: Callable[[Any], bool]) -> bool:
    """Whether a value of type `kind` holds, at any depth, a value whose type passes `leaf`."""
    import pyarrow as pa

    if leaf(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _holds(kind.value_type, leaf)
    if pa.types.is_struct(kind):
        return any(_holds(kind.field(i).type, leaf) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _holds(kind.value_type, leaf)
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return _holds(kind.value_type, leaf)
    if pa.types.is_map(kind):
        return _holds(kind.key_type, leaf) or _holds(kind.item_type, leaf)
    return False


def _has_text(kind: Any) -> bool:
    return _holds(kind, lambda leaf: _is_string(leaf) or _is_binary(leaf))


def _binary_cut(batch: Any) -> Any:
    """`batch` with each binary value cut to MAX_BINARY_TEXT_BYTES, in top-level columns and
    inside structs, lists and dictionaries (other nestings are cut in Python, once read)."""
    import pyarrow as pa

    if not any(_holds(f.type, _is_binary) for f in batch.schema):
        return batch
    return pa.RecordBatch.from_arrays([_cut(c) for c in batch.columns], names=batch.schema.names)


def _cut(array: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if not _holds(kind, _is_binary):
        return array
    if _is_binary(kind):
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            array = pc.cast(array, pa.large_binary())  # binary_slice has no other kernels
        return pc.binary_slice(array, 0, MAX_BINARY_TEXT_BYTES)
    if pa.types.is_struct(kind):
        children = [_cut(child) for child in array.flatten()]
        fields = [kind.field(i).with_type(c.type) for i, c in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lists = pa.ListArray if pa.types.is_list(kind) else pa.LargeListArray
        offsets = array.offsets  # of this slice, into the values of the whole array
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        values = _cut(array.values.slice(first, last - first))
        return lists.from_arrays(pc.subtract(offsets, first), values, mask=array.is_null())
    if pa.types.is_dictionary(kind):
        return pa.DictionaryArray.from_arrays(array.indices, _cut(array.dictionary))
    return array


def _text_batches(source: BinaryIO, kind: str) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == ".parquet":
        parquet = pq.ParquetFile(source)
        metadata = parquet.metadata
        for group in range(metadata.num_row_groups):
            size = metadata.row_group(group).total_byte_size
            if size > MAX_ROW_GROUP_BYTES:
                raise ValueError(f"row group {group} declares {size} bytes uncompressed")
        schema = parquet.schema_arrow
        columns = [f.name for f in schema if _has_text(f.type)]
        if not columns:
            return
        yield from parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False)
        return
    head = source.read(6)
    source.seek(0)
    if head == b"ARROW1":
        reader = pa.ipc.open_file(source)
        batches: Iterator[Any] = (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        reader = pa.ipc.open_stream(source)
        batches = iter(reader)
    keep = [i for i, f in enumerate(reader.schema) if _has_text(f.type)]
    if not keep:
        return
    for batch in batches:
        for start in range(0, batch.num_rows, BATCH_ROWS):
            yield batch.slice(start, BATCH_ROWS).select(keep)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
