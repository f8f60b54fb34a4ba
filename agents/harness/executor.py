"""The harness's tools, run as the agent's Unix user in its sandbox, never as root.

The harness itself runs as the platform (outside the sandbox, holding the scaffold's token);
every command the model asks for runs through `runuser -u USER` (`cluster.as_user`), born with
a clean environment (HOME, PATH with ~/.arena/bin first, the agent's own ~/.arena/config for
its tokens), in the run's cgroup when the supervisor gives a `preexec`, and with the run's
private /tmp, /var/tmp and /dev/shm when it has them (`cluster.private_tmp`). The file tools
run a small worker as the agent too (`file_helper.py`), so the kernel, not the harness,
decides what the agent may open.

Everything that comes back is bounded: output keeps its head and tail and says what was cut;
a command past its timeout is killed with every process it started, even those that left its
process group (`setsid`), because the harness is their subreaper.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import posixpath
import pwd
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from cluster.as_user import AsUser, as_user
from cluster.private_tmp import PrivateTmp

PR_SET_CHILD_SUBREAPER = 36
READ_CHUNK = 64 * 1024
EXIT_GRACE_S = 1.0  # after the command exits, how long its leftovers may hold the output open
HELPER_TIMEOUT_S = 30.0
HELPER_ANSWER_BYTES = 256 * 1024
CWD_REPORT_BYTES = 4096
# In the sandbox: start in the persisted directory, run the command, and report the directory
# it ended in on the descriptor $3 (a pipe the harness reads, bounded).
_SHELL = 'cd -- "$1" || exit 97\neval "$2"\nstatus=$?\npwd -P >&"$3" 2>/dev/null\nexit $status\n'
FILE_HELPER = (Path(__file__).with_name("file_helper.py")).read_text()


@dataclass(frozen=True)
class ToolResult:
    output: str
    exit_code: int | None  # None: killed at its timeout, or not run
    duration_s: float


class BoundedOutput:
    """The head and tail of a stream, in at most `limit` characters, with the cut said."""

    def __init__(self, limit: int) -> None:
        self.head_limit, self.tail_limit = limit * 2 // 3, limit // 3
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        cut = self.total - len(self.head) - len(self.tail)
        tail = self.tail.decode("utf-8", "replace")
        if cut > 0:
            return f"{head}\n…[{cut} bytes of output cut]…\n{tail}"
        return head + tail


def _become_subreaper() -> None:
    """Orphans of our commands come back to us, not to init: a timeout can find and kill a
    process that called setsid and forked away from its group."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, real uid), for every process /proc shows."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as status:
                text = status.read(4096).decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        try:
            found[int(entry)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]))
        except (KeyError, ValueError, IndexError):
            continue
    return found


def agent_descendants(uid: int) -> set[int]:
    """Our descendants that run as the agent's uid (our own servers and helpers never do)."""
    table, ours, mine = _processes(), set(), {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _) in table.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    for pid in mine:
        if pid != os.getpid() and table.get(pid, (0, -1))[1] == uid:
            ours.add(pid)
    return ours


def _kill_all(uid: int, spared: set[int], within_s: float = 5.0) -> None:
    """Kill the agent's descendants not in `spared` until none is left, zombies included.

    Killing a tree is not one step: when a parent dies, its children (already killed, or
    not yet seen) are reparented to us, the subreaper, some moments later. A single pass
    that reaps only what is our child at that instant leaves those as zombies, so this
    looks again, kills and reaps what arrived, until the tree is empty."""
    deadline = time.monotonic() + within_s
    while True:
        left = agent_descendants(uid) - spared
        if not left or time.monotonic() >= deadline:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):  # not ours yet: its parent's
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)


def _reap_orphans() -> None:
    """Collect the exit status of orphans reparented to us, so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _exchange(
    process: subprocess.Popen[bytes], request: bytes, deadline: float
) -> tuple[bytes, bytes, str]:
    """Write `request` to the process and read its output, without threads: (its standard
    output, the tail of its errors, what went wrong: "" when it closed its output in time
    and within HELPER_ANSWER_BYTES)."""
    assert process.stdin and process.stdout and process.stderr
    answer, errors = bytearray(), bytearray()
    pending = memoryview(request)
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdin, process.stdout, process.stderr):
            os.set_blocking(stream.fileno(), False)
        selector.register(process.stdin, selectors.EVENT_WRITE)
        selector.register(process.stdout, selectors.EVENT_READ)
        selector.register(process.stderr, selectors.EVENT_READ)
        open_outputs = 2
        while open_outputs:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(answer), bytes(errors), "no answer in time"
            for key, _ in selector.select(timeout=min(left, 0.5)):
                stream = key.fileobj  # type: ignore[assignment]  # the selector holds only the pipes registered above
                if stream is process.stdin:
                    try:
                        written = os.write(process.stdin.fileno(), pending[:READ_CHUNK])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        written = len(pending)  # a worker that stopped reading gets no more
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                try:
                    data = os.read(stream.fileno(), READ_CHUNK)  # type: ignore[attr-defined]
                except BlockingIOError:
                    continue
                if not data:
                    selector.unregister(stream)
                    open_outputs -= 1
                elif stream is process.stdout:
                    answer += data
                    if len(answer) > HELPER_ANSWER_BYTES:
                        too_large = f"an answer over {HELPER_ANSWER_BYTES} bytes"
                        return bytes(answer[:HELPER_ANSWER_BYTES]), bytes(errors), too_large
                else:
                    errors += data
                    del errors[: max(0, len(errors) - 4096)]
    return bytes(answer), bytes(errors), ""


class ToolExecutor:
    """Runs the model's tool calls as `unix_user` in `home`; the working directory persists
    between shell calls and stays inside the sandbox."""

    def __init__(
        self,
        *,
        unix_user: str,
        home: Path,
        python: str,
        preexec: Callable[[], None] | None = None,
        output_chars: int = 16_000,
        default_timeout_s: float = 600.0,
        max_timeout_s: float = 4 * 3600.0,
        view_lines: int = 400,
        file_timeout_s: float = HELPER_TIMEOUT_S,
        cwd: str | None = None,
        private: PrivateTmp | None = None,
    ) -> None:
        self.unix_user = unix_user
        self.uid = pwd.getpwnam(unix_user).pw_uid
        self.home = posixpath.normpath(str(home))
        self.python = python
        self.preexec = preexec
        self.output_chars = output_chars
        self.default_timeout_s = default_timeout_s
        self.max_timeout_s = max_timeout_s
        self.view_lines = view_lines
        self.file_timeout_s = file_timeout_s
        self.cwd = cwd if cwd and self._inside(cwd) else self.home
        # Each call in a mount namespace of its own whose /tmp and /var/tmp are the run's
        # folders on the agent's volume (the same for every call) and /dev/shm a fresh tmpfs.
        self.private = private
        _become_subreaper()

    # --- where ----------------------------------------------------------------------------

    def _inside(self, path: str) -> bool:
        normal = posixpath.normpath(path)
        return path.startswith("/") and (normal == self.home or normal.startswith(self.home + "/"))

    def _command(self, *argv: str) -> AsUser:
        """The tool's process as the agent, born with a clean environment (given to Popen,
        before runuser changes the uid): nothing of the platform's (its database URL, the
        scaffold's token) is ever in a process the agent can read. Under a private /tmp where
        the run has one."""
        started = as_user(
            self.unix_user,
            argv,
            env={
                "HOME": self.home,
                "PATH": f"{self.home}/.arena/bin:/usr/local/bin:/usr/bin:/bin",
                "PYTHONUNBUFFERED": "1",
            },
        )
        return replace(
            started, argv=[*(self.private.prefix if self.private else []), *started.argv]
        )

    def _preexec(self) -> None:
        if self.preexec is not None:
            self.preexec()

    # --- shell --------------------------------------------------------------------------

    def shell(self, command: str, timeout_s: float | None = None) -> ToolResult:
        timeout = min(max(float(timeout_s or self.default_timeout_s), 1.0), self.max_timeout_s)
        started = time.monotonic()
        before = agent_descendants(self.uid)  # background work of earlier calls is not ours
        cwd_read, cwd_write = os.pipe()
        os.set_inheritable(cwd_write, True)
        output = BoundedOutput(self.output_chars)
        try:
            child = self._command(
                "/bin/bash", "-c", _SHELL, "arena-shell", self.cwd, command, str(cwd_write)
            )
            process = subprocess.Popen(
                child.argv, env=child.env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd="/", start_new_session=True, pass_fds=(cwd_write,),
                preexec_fn=self._preexec if self.preexec else None,
            )  # fmt: skip
        except OSError as failed:
            os.close(cwd_read)
            os.close(cwd_write)
            return ToolResult(f"the command could not start: {failed}", None, 0.0)
        os.close(cwd_write)
        try:
            timed_out = self._pump(process, output, started + timeout)
        except BaseException:  # the harness is being stopped (SIGTERM): the command goes too
            self._kill_call(process, before)
            os.close(cwd_read)
            raise
        if timed_out:
            self._kill_call(process, before)
        process.wait()
        _reap_orphans()
        reported = self._read_cwd(cwd_read)
        notes = []
        if timed_out:
            notes.append(f"[killed after {timeout:.0f} s, with every process it started]")
        elif reported is not None:
            if self._inside(reported):
                self.cwd = posixpath.normpath(reported)
            else:
                notes.append(
                    f"[the working directory {reported[:200]!r} is outside your sandbox: the"
                    f" next command starts in {self.cwd}]"
                )
        text = output.text()
        if notes:
            text = (text + "\n" if text else "") + "\n".join(notes)
        exit_code = None if timed_out else process.returncode
        return ToolResult(text, exit_code, round(time.monotonic() - started, 3))

    def _kill_call(self, process: subprocess.Popen[bytes], before: set[int]) -> None:
        """The call's process group, then whatever of the agent's it started that left it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _kill_all(self.uid, spared=before)
        process.wait()

    def _pump(
        self, process: subprocess.Popen[bytes], output: BoundedOutput, deadline: float
    ) -> bool:
        """Read the output until it ends; True if the deadline came first."""
        assert process.stdout is not None
        stream = process.stdout
        os.set_blocking(stream.fileno(), False)
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            exited_at: float | None = None
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return True
                if exited_at is None and process.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                    return False  # a leftover background process holds the pipe open
                if not selector.select(timeout=min(0.2, deadline - now)):
                    continue
                try:
                    data = os.read(stream.fileno(), READ_CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    process.wait()  # EOF: wait for the exit, bounded by the deadline below
                    return False
                output.add(data)

    def _read_cwd(self, fd: int) -> str | None:
        try:
            os.set_blocking(fd, False)
            data = os.read(fd, CWD_REPORT_BYTES)
        except (BlockingIOError, OSError):
            data = b""
        finally:
            os.close(fd)
        text = data.decode("utf-8", "replace").strip()
        return text.splitlines()[-1] if text else None

    # --- files --------------------------------------------------------------------------

    def _file_helper(self, request: dict[str, object]) -> tuple[bool, str]:
        """One request to the file worker, run as the agent: its answer read up to
        HELPER_ANSWER_BYTES, the whole exchange bounded by HELPER_TIMEOUT_S (a worker the
        agent stops or floods, from a process of its own, costs the harness nothing)."""
        before = agent_descendants(self.uid)
        try:
            child = self._command(self.python, "-I", "-c", FILE_HELPER)
            process = subprocess.Popen(
                child.argv, env=child.env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd="/", start_new_session=True,
                preexec_fn=self._preexec if self.preexec else None,
            )  # fmt: skip
        except OSError as failed:
            return False, f"the file tool could not start: {failed}"
        answer, errors, wrong = _exchange(
            process, json.dumps(request).encode(), time.monotonic() + self.file_timeout_s
        )
        if wrong:
            self._kill_call(process, before)
        process.wait()
        _reap_orphans()
        if wrong:
            return False, f"the file tool failed: {wrong}"
        try:
            parsed = json.loads(answer)
            return bool(parsed["ok"]), str(parsed.get("text") or parsed.get("error"))
        except (ValueError, KeyError, TypeError):
            error = errors[-2000:].decode(errors="replace")
            return False, f"the file tool failed (exit {process.returncode}): {error}"

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path))

    def view_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> ToolResult:
        started = time.monotonic()
        start = max(1, int(start_line))
        end = int(end_line) if end_line else start + self.view_lines - 1
        end = min(max(end, start), start + self.view_lines - 1)
        ok, text = self._file_helper({
            "op": "view", "path": self._path(path), "start_line": start, "end_line": end,
            "max_chars": self.output_chars,
        })  # fmt: skip
        return ToolResult(text, 0 if ok else 1, round(time.monotonic() - started, 3))

    def edit_file(self, request: dict[str, object]) -> ToolResult:
        """`request`: action (create / str_replace / insert), path, and text, old and new,
        or line, already checked for type by the loop."""
        started = time.monotonic()
        ok, text = self._file_helper(
            {**request, "op": "edit", "path": self._path(str(request["path"]))}
        )
        return ToolResult(text, 0 if ok else 1, round(time.monotonic() - started, 3))
