"""The code scorer's two halves, in two processes, so that an answer cannot forge its verdict.

- The **host** runs in the answer's process (`arena-untrusted`): it runs the answer's code as
  `__main__`, then calls the answer's functions when asked and sends back what they returned.
- The **judge** runs in a process of its own (`arena-verdict`, forked by the launcher before
  the answer starts; not dumpable, so no other process of its user may trace it or open its
  descriptors): it runs the benchmark's setup (HumanEval's prompt), then the asserts, where
  every name that neither defines (the functions an MBPP assert calls), and the entry point,
  stands for the answer's function of that name, and the verdict is whether they ran to
  their end.

Between them only plain data travels (None, bools, numbers, strings, bytes, lists, tuples,
dicts, sets), as length-prefixed JSON frames of at most MAX_FRAME_BYTES, each read by a deadline.
A value that is not plain data (an object of the answer's own class, a generator, a function)
stays with the host and reaches the judge as an opaque reference that can be passed back,
called or iterated, and is no value: comparing it (`==`, `!=`, `in`, `<`), hashing it or
testing its truth raises TypeError, which fails the asserts. So the asserts compare real values with real
`==`, in a process the answer's code never runs in, and the answer never sees them: only the
arguments of each call reach it.

Standard library only: the launcher (`python -I -S`) imports it, and the launcher copies it next
to the answer for the host (`python -I -B host.py answer.py CALLS_FD REPLIES_FD`).
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import json
import os
import select
import struct
import symtable
import sys
import time
import types

MAX_FRAME_BYTES = 4 << 20
MAX_DEPTH = 100
MAX_ITEMS = 1 << 20  # what iterating a reference may yield
MESSAGE_CHARS = 300
_HEADER = struct.Struct(">I")
_SMALL_INT = 1 << 53
_TAGS = ("i", "c", "b", "h", "n", "d", "l", "t", "s", "f")
# A candidate's StopIteration would end the asserts' own loops and generators early.
_NOT_MAPPED = (StopIteration, StopAsyncIteration)


class WireError(Exception):
    """The other side sent what the wire does not carry, or nothing in time."""


class CandidateError(Exception):
    """The answer's function raised an exception that is not one of Python's own."""


# --- the wire ------------------------------------------------------------------------------


def _send(fd: int, message: dict, deadline: float) -> None:
    body = json.dumps(message).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise WireError(f"a message of {len(body)} bytes is over {MAX_FRAME_BYTES}")
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        _wait(fd, deadline, write=True)
        data = data[os.write(fd, data) :]


def _receive(fd: int, deadline: float) -> dict:
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    if size > MAX_FRAME_BYTES:
        raise WireError(f"a message of {size} bytes is over {MAX_FRAME_BYTES}")
    try:
        message = json.loads(_read_exactly(fd, size, deadline))
    except (ValueError, RecursionError) as failed:
        raise WireError(f"not a message: {str(failed)[:MESSAGE_CHARS]}") from None
    if type(message) is not dict:
        raise WireError("not a message")
    return message


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        _wait(fd, deadline, write=False)
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise WireError("the other side is gone")
        data += chunk
    return bytes(data)


def _wait(fd: int, deadline: float, *, write: bool) -> None:
    left = None if deadline == float("inf") else deadline - time.monotonic()
    if left is not None and left <= 0:
        raise WireError("out of time")
    ready = select.select([], [fd], [], left)[1] if write else select.select([fd], [], [], left)[0]
    if not ready:
        raise WireError("out of time")


def encode(value, reference, depth: int = 0):
    """`value` as wire data; `reference(value)` gives the wire form of what is not plain data
    (None: it cannot travel)."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        value = int.__int__(value)
        return value if -_SMALL_INT < value < _SMALL_INT else {"i": format(value, "x")}
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode()}
    for kind, tag in ((list, "l"), (tuple, "t"), (set, "s"), (frozenset, "f")):
        if isinstance(value, kind):
            return {tag: [encode(item, reference, depth + 1) for item in value]}
    if isinstance(value, dict):
        pairs = [[encode(k, reference, depth + 1), encode(v, reference, depth + 1)]
                 for k, v in value.items()]  # fmt: skip
        return {"d": pairs}
    found = reference(value)
    if found is None:
        raise TypeError(f"{type(value).__name__} cannot be passed to the answer")
    return found


def decode(data, dereference, depth: int = 0):
    """Wire data as plain values of Python's own types; `dereference(tag, body)` for
    references. Anything else is a WireError."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    if data is None or type(data) in (bool, str, int, float):
        return data
    if type(data) is not dict or len(data) != 1:
        raise WireError("not a value")
    ((tag, body),) = data.items()
    if tag not in _TAGS:
        raise WireError(f"no value is tagged {tag[:20]!r}")
    try:
        if tag == "i":
            return int(body, 16)
        if tag == "c":
            return complex(float(body[0]), float(body[1]))
        if tag == "b":
            return base64.b64decode(body, validate=True)
        if tag in ("h", "n"):
            return dereference(tag, body)
        if tag == "d":
            return {decode(k, dereference, depth + 1): decode(v, dereference, depth + 1)
                    for k, v in body}  # fmt: skip
        items = [decode(item, dereference, depth + 1) for item in body]
        if tag == "l":
            return items
        if tag == "t":
            return tuple(items)
        if tag == "s":
            return set(items)
        return frozenset(items)
    except WireError:
        raise
    except Exception as failed:  # malformed: wrong types, unhashable keys, bad base64
        raise WireError(f"not a value: {type(failed).__name__}") from None


# --- the judge (its own process) ----------------------------------------------------------


class Remote:
    """Something the answer holds: its function of a name, or a value that is not plain data."""

    __slots__ = ("_link", "_ref")

    def __init__(self, link: _Link, ref: dict):
        self._link, self._ref = link, ref

    def __call__(self, *args, **kwargs):
        return self._link.request("call", self._ref, list(args), kwargs)

    def __iter__(self):
        return iter(self._link.request("iter", self._ref, [], {}))

    def __repr__(self) -> str:
        return f"<the answer's {next(iter(self._ref.values()))!r}>"

    # Not a value: the answer's object is not here to say what it equals or whether it is
    # true, and a reference that did (identity, or object's defaults) would pass `!=`, `not in`
    # and a bare `assert`. Only `is` and passing it back to the answer work.
    def _not_a_value(self, *_):
        raise TypeError(f"{self!r} is not plain data: the asserts cannot compare or test it")

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _not_a_value


class _Link:
    def __init__(self, calls_fd: int, replies_fd: int, deadline: float):
        self.calls_fd, self.replies_fd, self.deadline = calls_fd, replies_fd, deadline
        self.broken: str | None = None  # once broken, no verdict passes

    def receive(self) -> dict:
        try:
            return _receive(self.replies_fd, self.deadline)
        except (WireError, OSError) as failed:
            self.broken = self.broken or f"the answer's process: {failed}"
            raise WireError(self.broken) from None

    def request(self, op: str, ref: dict, args: list, kwargs: dict):
        if self.broken:
            raise WireError(self.broken)
        message = {"op": op, "target": ref, "args": encode(args, self._reference),
                   "kwargs": encode(kwargs, self._reference)}  # fmt: skip
        try:
            _send(self.calls_fd, message, self.deadline)
        except (WireError, OSError) as failed:
            self.broken = f"the answer's process: {failed}"
            raise WireError(self.broken) from None
        reply = self.receive()
        if "ok" in reply:
            try:
                return decode(reply["ok"], self._dereference)
            except WireError as failed:
                self.broken = f"the answer's reply: {failed}"
                raise WireError(self.broken) from None
        raise _raised(reply)

    def _reference(self, value) -> dict | None:
        if type(value) is Remote and value._link is self:
            return value._ref
        return None

    def _dereference(self, tag: str, body) -> Remote:
        if tag != "h" or type(body) is not int:
            raise WireError("the answer may only hand back its own objects")
        return Remote(self, {"h": body})


def _raised(reply: dict) -> Exception:
    name, message = str(reply.get("raised", ""))[:100], str(reply.get("message", ""))
    message = message[:MESSAGE_CHARS]
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, _NOT_MAPPED):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 (a type that wants other arguments)
            pass
    return CandidateError(f"{name}: {message}")


def free_names(asserts: str) -> set[str]:
    """The global names the asserts read but never bind, builtins aside."""
    top = symtable.symtable(asserts, "<asserts>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (table is top or symbol.is_global()):
                used.add(symbol.get_name())
    return {name for name in used - bound if not hasattr(builtins, name)}


def imported_modules(asserts: str) -> list[str]:
    """The modules the asserts import, so that the launcher can load them before it drops to
    the verdict user (who may not read the platform's interpreter's files)."""
    found = []
    for node in ast.walk(ast.parse(asserts)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def judge(
    asserts: str,
    calls_fd: int,
    replies_fd: int,
    deadline: float,
    *,
    setup: str = "",
    answer_names: tuple[str, ...] = (),
) -> dict:
    """Run the asserts against the answer over the two pipes: {"passed": bool, "reason": str}.

    `setup` is the benchmark's own code the asserts need (HumanEval's prompt: its imports and
    helpers such as `encode_cyclic`), run here first, so that a helper the asserts call is the
    benchmark's, not the answer's; the answer's functions are then the asserts' names that
    neither define, and `answer_names` (the entry point, which the prompt defines as a stub)."""
    link = _Link(calls_fd, replies_fd, deadline)
    try:
        prelude = compile(setup, "<setup>", "exec", dont_inherit=True, optimize=0)
        code = compile(asserts, "<asserts>", "exec", dont_inherit=True, optimize=0)
        names = free_names(asserts)
        hello = link.receive()
    except (SyntaxError, ValueError, WireError) as failed:
        return {"passed": False, "reason": f"{type(failed).__name__}: {failed}"[:MESSAGE_CHARS]}
    if hello.get("loaded") is not True:
        return {"passed": False, "reason": f"the answer failed: {_raised(hello)}"}
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(prelude, namespace)  # noqa: S102 (the benchmark's own code)
    except BaseException as failed:  # noqa: BLE001 (no verdict without it)
        reason = f"the benchmark's setup failed: {type(failed).__name__}: {failed}"
        return {"passed": False, "reason": reason[:MESSAGE_CHARS]}
    theirs = {name for name in names if name not in namespace} | set(answer_names)
    namespace.update({name: Remote(link, {"n": name}) for name in theirs})
    try:
        exec(code, namespace)  # noqa: S102 (the benchmark's own asserts)
    except BaseException as failed:  # noqa: BLE001 (anything but the end is a failure)
        return {"passed": False, "reason": f"{type(failed).__name__}: {failed}"[:MESSAGE_CHARS]}
    if link.broken:
        return {"passed": False, "reason": link.broken[:MESSAGE_CHARS]}
    if time.monotonic() > deadline:
        return {"passed": False, "reason": "out of time"}
    with contextlib.suppress(WireError, OSError):  # else the launcher ends it anyway
        _send(calls_fd, {"op": "done"}, deadline)
    return {"passed": True, "reason": "every assert passed"}


# --- the host (the answer's process) -------------------------------------------------------


def host(answer_path: str, calls_fd: int, replies_fd: int) -> None:
    """Run the answer's code, then serve the judge's calls until it is done. What the answer
    does to this code can change only what its functions seem to return."""
    _exit, forever = os._exit, float("inf")
    module = types.ModuleType("__main__")
    module.__file__ = answer_path
    sys.modules["__main__"] = module
    handles: dict[int, object] = {}

    def reference(value) -> dict:
        handles[id(value)] = value
        return {"h": id(value)}

    def dereference(tag: str, body):
        if tag == "h":
            return handles[body]
        return module.__dict__[body] if body in module.__dict__ else _missing(body)

    def reply(message: dict) -> None:
        _send(replies_fd, message, forever)

    try:
        with open(answer_path, "rb") as source:
            exec(compile(source.read(), answer_path, "exec"), module.__dict__)  # noqa: S102
    except BaseException as failed:  # noqa: BLE001 (told to the judge, which fails the answer)
        reply({"raised": type(failed).__name__, "message": str(failed)[:MESSAGE_CHARS]})
        _exit(1)
    reply({"loaded": True})
    while True:
        try:
            message = _receive(calls_fd, forever)
        except WireError:
            break
        if message.get("op") == "done":
            break
        try:
            target = decode(message["target"], dereference)
            args = decode(message["args"], dereference)
            kwargs = decode(message["kwargs"], dereference)
            iterate = message["op"] == "iter"
            result = list(_bounded(target)) if iterate else target(*args, **kwargs)
            reply({"ok": encode(result, reference)})
        except BaseException as failed:  # noqa: BLE001 (the judge decides what it means)
            reply({"raised": type(failed).__name__, "message": str(failed)[:MESSAGE_CHARS]})
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the answer may have replaced it
            stream.flush()
    _exit(0)


def _missing(name: str):
    raise NameError(f"name {name!r} is not defined")


def _bounded(iterable):
    for count, item in enumerate(iterable):
        if count >= MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} items")
        yield item


if __name__ == "__main__":
    host(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
