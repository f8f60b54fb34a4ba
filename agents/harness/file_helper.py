"""The file tools' worker: run as the agent's Unix user (`python3 -I -c <this file>`), never
as root, so the operating system decides what the agent may open: a link to /etc/shadow is
refused by the kernel, not by a check the harness could get wrong.

Standard library only, Python 3.8 or later: it runs with the training environment's python
that every agent user can execute. It reads one JSON request on standard input and writes one
JSON answer on standard output: {"ok": true, "text": ...} or {"ok": false, "error": ...}.
Every read is bounded: a view stops after its lines and characters, an edit refuses files
larger than MAX_EDIT_BYTES.
"""

import json
import os
import sys
import tempfile

MAX_EDIT_BYTES = 4 * 1024 * 1024
MAX_LINE_CHARS = 2000


def view(request):
    path, start, end = request["path"], request["start_line"], request["end_line"]
    max_chars = request["max_chars"]
    shown, size, number = [], 0, 0
    with open(path, "rb") as source:
        for number, raw in enumerate(source, start=1):  # noqa: B007 (number is read after)
            if number < start:
                continue
            if number > end or size >= max_chars:
                break
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " …[line cut]"
            shown.append(f"{number:6d}\t{line}")
            size += len(line) + 8
    text = "\n".join(shown)
    if size >= max_chars:
        text += f"\n…[view cut at {max_chars} characters: ask for a smaller line range]"
    return text or f"(no lines in {start}..{end}; the file has {number})"


def _read_for_edit(path):
    with open(path, "rb") as source:
        data = source.read(MAX_EDIT_BYTES + 1)
    if len(data) > MAX_EDIT_BYTES:
        raise ValueError(f"the file is larger than {MAX_EDIT_BYTES} bytes: edit it with the shell")
    return data.decode("utf-8")


def _write(path, text, must_not_exist=False):
    """Atomically, in the file's folder: a reader sees the old file or the new one."""
    folder = os.path.dirname(os.path.abspath(path))
    if must_not_exist and os.path.lexists(path):
        raise ValueError(f"{path} exists: use str_replace or insert to change it")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".edit-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        if os.path.exists(path):
            os.chmod(temporary, os.stat(path).st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def edit(request):
    path, action = request["path"], request["action"]
    if action == "create":
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        _write(path, request["text"], must_not_exist=not request.get("overwrite"))
        return f"created {path} ({len(request['text'])} characters)"
    text = _read_for_edit(path)
    if action == "str_replace":
        old, new = request["old"], request["new"]
        found = text.count(old) if old else 0
        if found != 1:
            raise ValueError(
                f"old text found {found} times in {path}; it must be found exactly once"
            )
        _write(path, text.replace(old, new, 1))
        return f"replaced 1 occurrence in {path}"
    if action == "insert":
        lines = text.splitlines(True)
        at = request["line"]
        if not 0 <= at <= len(lines):
            raise ValueError(f"line {at} is outside 0..{len(lines)}")
        added = request["text"] if request["text"].endswith("\n") else request["text"] + "\n"
        if at and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        _write(path, "".join(lines[:at]) + added + "".join(lines[at:]))
        return f"inserted {added.count(chr(10))} line(s) after line {at} of {path}"
    raise ValueError(f"unknown action {action!r}")


def main():
    try:
        request = json.loads(sys.stdin.read(1024 * 1024 * 8))
        text = view(request) if request["op"] == "view" else edit(request)
        answer = {"ok": True, "text": text}
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(answer))


main()
