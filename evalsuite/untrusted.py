"""Run untrusted Python (what a contestant's model answered) with none of the platform's powers.

The agent chooses what its model answers, so the code scorer runs adversarial code. Each
program runs:

- as the dedicated unprivileged user `arena-untrusted` (created on demand when the platform is
  root, no home, no shell, no supplementary groups), never as the platform's user; where the
  platform is not root (a developer's machine) as the current user, said in a log line;
- in a private, empty, 0700 folder owned by that user: with root, a fresh mount namespace with
  small tmpfs mounts over /tmp, /var/tmp and /dev/shm (gone with the run); otherwise a
  temporary folder removed after;
- with an empty environment (PATH only), stdin closed, rlimits (address space, CPU = the time
  limit, processes, file size, open files, no core), in a session of its own;
- under a root launcher (this file run as a script, stdlib only) that is a child subreaper: at
  the time limit, or when the program exits, the session and every process descended from it
  (`setsid`, double forks included) are killed, so nothing outlives the run;
- with its output (stdout and stderr together) read up to OUTPUT_CAP_BYTES, plus the last
  TAIL_BYTES; the rest is drained and dropped.

The program travels to the launcher on a pipe, never on a command line other users can read in
/proc (it holds the benchmark's asserts).

The user's uid also goes into the firewall's `agents` set (agents/firewall.py) when Django is
configured in the process; an evaluation job without Django (a Slurm node) leaves that to the
organizer: `python manage.py shell -c "from evalsuite.untrusted import untrusted_firewall_block;
untrusted_firewall_block()"`, or the cluster's network policy for that uid.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import json
import logging
import os
import pwd
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

UNTRUSTED_USER = "arena-untrusted"
OUTPUT_CAP_BYTES = 4096
TAIL_BYTES = 1024
MEMORY_BYTES = 1 << 30
MAX_PROCESSES = 64  # for the whole uid, threads included
MAX_FILE_BYTES = 1 << 20
MAX_OPEN_FILES = 64
TMPFS_OPTIONS = "size=64m,nr_inodes=4096"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
LAUNCHER_GRACE_S = 30.0

_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18


class UntrustedRunError(RuntimeError):
    """The program could not be run at all (not the program's own failure)."""


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None when killed at the time limit
    output: bytes  # the first OUTPUT_CAP_BYTES of stdout and stderr together
    tail: bytes  # the last TAIL_BYTES
    truncated: bool
    timed_out: bool
    user: str  # whom it ran as
    isolation: str  # "mount namespace" or "temporary folder"


# --- the platform's side -----------------------------------------------------------------------

_identity_lock = threading.Lock()
_identity: tuple[int, int, str] | None = None
_warned_unprivileged = False


def untrusted_identity() -> tuple[int, int, str] | None:
    """(uid, gid, name) of the unprivileged user, made on demand; None when not root."""
    global _identity, _warned_unprivileged
    if os.geteuid() != 0:
        if not _warned_unprivileged:
            _warned_unprivileged = True
            me = pwd.getpwuid(os.geteuid()).pw_name
            log.warning(
                "not root: untrusted code runs as the current user %s (still with an empty "
                "environment, rlimits, a private folder and every process killed after), "
                "not as %s",
                me,
                UNTRUSTED_USER,
            )
        return None
    with _identity_lock:
        if _identity is None:
            _identity = _ensure_user()
            _firewall_block_quietly()
        return _identity


def _ensure_user() -> tuple[int, int, str]:
    try:
        entry = pwd.getpwnam(UNTRUSTED_USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--user-group", UNTRUSTED_USER],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        try:  # another process may have made it meanwhile
            entry = pwd.getpwnam(UNTRUSTED_USER)
        except KeyError:
            raise UntrustedRunError(
                f"cannot create the user {UNTRUSTED_USER}: {done.stderr.strip()}"
            ) from None
        log.info("created the unprivileged user %s (uid %d)", UNTRUSTED_USER, entry.pw_uid)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise UntrustedRunError(f"{UNTRUSTED_USER} has uid or gid 0: refusing to use it")
    return entry.pw_uid, entry.pw_gid, UNTRUSTED_USER


def untrusted_firewall_block() -> None:
    """Keep the user off the platform's ports, as agents are (Django must be configured)."""
    from agents.firewall import agent_firewall_block

    agent_firewall_block(unix_user=UNTRUSTED_USER)


def _firewall_block_quietly() -> None:
    try:
        from django.apps import apps
        from django.conf import settings

        if not (settings.configured and apps.ready):
            log.info(
                "no Django here: the organizer keeps %s off the platform's ports "
                "(evalsuite/untrusted.py)",
                UNTRUSTED_USER,
            )
            return
        untrusted_firewall_block()
    except Exception as failed:  # the run is still confined; the organizer is told
        log.warning("could not add %s to the firewall's agents set: %s", UNTRUSTED_USER, failed)


def run_python(program: str, *, timeout_s: float) -> Outcome:
    """Run `program` with the confinement above and return what it did."""
    identity = untrusted_identity()
    config = {
        "uid": identity[0] if identity else None,
        "gid": identity[1] if identity else None,
        "user": identity[2] if identity else pwd.getpwuid(os.geteuid()).pw_name,
        "timeout_s": float(timeout_s),
        "python": _interpreter(unprivileged=identity is not None),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-B", str(Path(__file__).resolve()), json.dumps(config)],
            input=program.encode("utf-8", "replace"),
            capture_output=True,
            timeout=timeout_s + LAUNCHER_GRACE_S,
            env={"PATH": SAFE_PATH},
        )
    except subprocess.TimeoutExpired:
        raise UntrustedRunError("the launcher itself did not finish") from None
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise UntrustedRunError(
            f"the launcher failed (exit {done.returncode}): {done.stderr[-2000:]!r}"
        ) from None
    if "error" in result:
        raise UntrustedRunError(result["error"])
    return Outcome(
        returncode=result["returncode"],
        output=base64.b64decode(result["output"]),
        tail=base64.b64decode(result["tail"]),
        truncated=result["truncated"],
        timed_out=result["timed_out"],
        user=result["user"],
        isolation=result["isolation"],
    )


def _interpreter(*, unprivileged: bool) -> str:
    """This interpreter, or (for the unprivileged user, who may not reach a virtual environment
    under a private home) the first system Python everyone can run."""
    candidates = [sys.executable, os.path.realpath(sys.executable), *SYSTEM_PYTHONS]
    for path in candidates if unprivileged else candidates[:1]:
        if _everyone_runs(path):
            return path
    if not unprivileged:
        return sys.executable
    raise UntrustedRunError(f"no Python that {UNTRUSTED_USER} may run: install python3")


def _everyone_runs(path: str) -> bool:
    real = Path(os.path.realpath(path))
    try:
        if not real.is_file() or real.stat().st_mode & 0o005 != 0o005:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False


# --- the launcher (a separate process: `python -I -S untrusted.py CONFIG`) ----------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _private_folder(uid: int | None, gid: int | None) -> tuple[Path, str, Path | None]:
    """(folder, isolation, folder to remove after or None)."""
    if os.geteuid() == 0 and uid is not None:
        libc = _libc()
        if libc.unshare(_CLONE_NEWNS) == 0:
            if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
                raise OSError(ctypes.get_errno(), "cannot make mounts private")
            for place in ("/var/tmp", "/dev/shm", "/tmp"):
                if not os.path.isdir(place):
                    continue
                options = f"{TMPFS_OPTIONS},mode=0700,uid={uid},gid={gid}".encode()
                if libc.mount(b"tmpfs", place.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                              options) != 0:  # fmt: skip
                    raise OSError(ctypes.get_errno(), f"cannot mount a private {place}")
            return Path("/tmp"), "mount namespace", None
    folder = Path(tempfile.mkdtemp(prefix="arena-untrusted-"))
    return folder, "temporary folder", folder


def _own_tasks(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def _limits(cpu_s: int, nproc: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _descendants() -> list[int]:
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(me, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_everything(session: int) -> None:
    """Kill the session, then every descendant (orphans come to us: we are the subreaper)
    until none is left; stopped first so that none forks meanwhile."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signal.SIGKILL)
    for _ in range(500):
        pids = _descendants()
        if not pids:
            return
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
        time.sleep(0.005)
        _reap()
    raise RuntimeError("processes of the run kept appearing")


def _launch(config: dict) -> dict:
    program = sys.stdin.buffer.read()
    uid, gid = config["uid"], config["gid"]
    timeout_s = float(config["timeout_s"])
    if _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"error": "cannot become a child subreaper"}
    folder, isolation, remove = _private_folder(uid, gid)
    try:
        script = folder / "answer.py"
        script.write_bytes(program)
        if uid is not None:
            os.chown(script, uid, gid)
            os.chown(folder, uid, gid)
        folder.chmod(0o700)
        nproc = MAX_PROCESSES if uid is not None else _own_tasks(os.geteuid()) + MAX_PROCESSES
        extra = {"user": uid, "group": gid, "extra_groups": []} if uid is not None else {}
        # The wall clock is the limit that speaks; the CPU limit, a second above it, is the
        # backstop should this launcher be starved of the CPU itself.
        cpu_s = max(1, int(timeout_s + 0.999)) + 1
        try:
            process = subprocess.Popen(
                [config["python"], "-I", "-B", str(script)],
                cwd=folder,
                env={"PATH": SAFE_PATH},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=lambda: _limits(cpu_s, nproc),  # noqa: PLW1509 (single-threaded)
                **extra,
            )
        except OSError as failed:
            return {"error": f"cannot start the program: {failed}"}
        deadline = time.monotonic() + timeout_s
        head, tail, truncated, timed_out = _read(process, deadline)
        if not timed_out:
            try:  # its output ended before it did
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        _kill_everything(process.pid)
        returncode = None if timed_out else process.wait()
        if returncode == -signal.SIGXCPU:  # it spent its time on the CPU instead of the clock
            returncode, timed_out = None, True
        return {
            "returncode": returncode,
            "output": base64.b64encode(head).decode(),
            "tail": base64.b64encode(tail).decode(),
            "truncated": truncated,
            "timed_out": timed_out,
            "user": config["user"],
            "isolation": isolation,
        }
    finally:
        if remove is not None:
            shutil.rmtree(remove, ignore_errors=True)


def _read(process: subprocess.Popen, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Read until the program exits (or its output ends) or the time limit; keep the head and
    the tail. A child left holding the pipe does not keep us waiting."""
    fd = process.stdout.fileno()  # type: ignore[union-attr]
    head, tail, truncated = bytearray(), bytearray(), False
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return bytes(head), bytes(tail), truncated, True
        if exited_at is None and process.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.2:
            break
        ready, _, _ = select.select([fd], [], [], min(0.05, deadline - now))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError as failed:
            if failed.errno == errno.EINTR:
                continue
            break
        if not chunk:
            break
        room = OUTPUT_CAP_BYTES - len(head)
        head += chunk[:room]
        truncated = truncated or len(chunk) > room
        tail = (tail + chunk)[-TAIL_BYTES:]
    return bytes(head), bytes(tail), truncated, False


if __name__ == "__main__":
    try:
        outcome = _launch(json.loads(sys.argv[1]))
    except Exception as failed:  # noqa: BLE001 (the platform's side raises it)
        outcome = {"error": f"{type(failed).__name__}: {failed}"}
    sys.stdout.write(json.dumps(outcome))
