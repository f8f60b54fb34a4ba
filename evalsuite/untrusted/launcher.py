"""The launcher: run as root by `run_python` (`python -I -S -B launcher.py CONFIG`, the work on
stdin), standard library only. It confines the program (see the package's docstring), forks the
judge when there are asserts, and prints one JSON object: what the program did."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import importlib
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from evalsuite.untrusted import code_judge
except ImportError:  # run as a script, with the standard library only
    sys.path.append(str(Path(__file__).resolve().parent))
    import code_judge  # type: ignore[no-redef]

OUTPUT_CAP_BYTES = 4096
TAIL_BYTES = 1024
MEMORY_BYTES = 1 << 30
MAX_PROCESSES = 64  # for the whole uid, threads included
MAX_FILE_BYTES = 1 << 20
MAX_OPEN_FILES = 64
TMPFS_OPTIONS = "size=64m,nr_inodes=4096"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
JUDGE_MARGIN_S = 0.5  # the judge stops this long before the time limit, to hand in its verdict
VERDICT_GRACE_S = 1.0  # how long the program may linger once the verdict is in
VERDICT_BYTES = 4096

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_SECCOMP_RET_KILL_PROCESS, _SECCOMP_RET_ERRNO, _SECCOMP_RET_ALLOW = 0x80000000, 0x50000, 0x7FFF0000
# machine: (AUDIT_ARCH_*, socket's number, io_uring's numbers, the first number not of the ABI:
# x32's calls are x86_64's plus 0x40000000)
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 41, (425, 426, 427), 0x40000000),
    "aarch64": (0xC00000B7, 198, (425, 426, 427), 0x40000000),
}
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
_CLONE_NEWPID = 0x20000000
_MS_NOEXEC = 8
# A pids cgroup per run (cgroup v1's pids controller, or v2's), so that the uid's processes
# (shared by every run) are not one pool: MAX_PROCESSES for the program, plus the launcher's two
# processes and the judge. The uid's RLIMIT_NPROC is then only a backstop.
PIDS_CGROUPS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
RUN_PROCESSES = MAX_PROCESSES + 3
SHARED_NPROC_BACKSTOP = MAX_PROCESSES * 64
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": 8, "noatime": 1024,
                "nodiratime": 2048, "relatime": 1 << 21}  # fmt: skip


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _private_folder(
    uid: int | None, gid: int | None, *, allow_unconfined: bool
) -> tuple[Path, str, Path | None]:
    """(folder, isolation, folder to remove after or None)."""
    if os.geteuid() == 0 and uid is not None:
        libc = _libc()
        # A network namespace of its own (only a loopback, down): nothing the program sees
        # can leave by the network, whatever the firewall on this node says.
        # A PID namespace of its own: kill(-1) and /proc reach only this run's processes. The
        # other namespaces are the child's alone: this process keeps the host's mounts, to
        # remove the run's cgroup after.
        if libc.unshare(_CLONE_NEWPID) == 0:
            group = _run_process_group()
            _become_init(group)  # from here on, pid 1 of the new namespace
            if libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC) != 0:
                raise OSError(ctypes.get_errno(), "the kernel refused new namespaces")
            if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
                raise OSError(ctypes.get_errno(), "cannot make mounts private")
            _read_only_everywhere(libc)
            for place in ("/var/tmp", "/dev/shm", "/tmp"):
                if not os.path.isdir(place):
                    continue
                options = f"{TMPFS_OPTIONS},mode=0700,uid={uid},gid={gid}".encode()
                if libc.mount(b"tmpfs", place.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                              options) != 0:  # fmt: skip
                    raise OSError(ctypes.get_errno(), f"cannot mount a private {place}")
            if libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                          None) != 0:  # fmt: skip
                raise OSError(ctypes.get_errno(), "cannot mount this namespace's /proc")
            limit = "its own process limit" if group else "the uid's shared process limit"
            return Path("/tmp"), f"mount, network, IPC and PID namespaces; {limit}", None
        if not allow_unconfined:
            raise OSError(ctypes.get_errno(), "the kernel refused new namespaces")
    elif not allow_unconfined:
        raise OSError(errno.EPERM, "not root: the program cannot be confined")
    folder = Path(tempfile.mkdtemp(prefix="arena-untrusted-"))
    return folder, "temporary folder", folder


def _run_process_group() -> Path | None:
    """A pids cgroup for this run alone, joined by this process (its children inherit it);
    None where no pids controller is at hand."""
    for base in PIDS_CGROUPS:
        controllers = base / "cgroup.controllers"  # cgroup v2 only
        if controllers.exists():
            if "pids" not in controllers.read_text().split():
                continue
        elif not (base / "pids.max").exists() and base.name != "pids":
            continue
        group = base / "arena-untrusted" / f"run-{os.getpid()}"
        try:
            group.parent.mkdir(exist_ok=True)
            if controllers.exists():
                for level in (base, group.parent):
                    (level / "cgroup.subtree_control").write_text("+pids")
            group.mkdir()
            (group / "pids.max").write_text(str(RUN_PROCESSES))
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            continue
        return group
    return None


def _become_init(group: Path | None) -> None:
    """Fork: the child (pid 1 of the new PID namespace) returns and does the run; this process
    waits for it, leaves and removes the run's cgroup, and exits (the child printed the
    outcome). When the child ends, the kernel kills whatever else is left in the namespace."""
    pid = os.fork()
    if pid == 0:
        return
    _, status = os.waitpid(pid, 0)
    if group is not None:
        with contextlib.suppress(OSError):
            (group.parent.parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(200):  # the namespace's last processes may still be exiting
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.01)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _read_only_everywhere(libc: ctypes.CDLL) -> None:
    """Make every mount of this namespace read-only (keeping its other flags), so that nothing
    the program sees can stay behind in a folder everyone may write to (/run/lock)."""
    with open("/proc/self/mountinfo") as table:
        rows = [line.split() for line in table]
    for row in rows:
        target = re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), row[4])
        flags = sum(_MOUNT_FLAGS.get(option, 0) for option in row[5].split(","))
        flags |= _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        if libc.mount(None, target.encode(), None, flags, None) != 0:
            failure = ctypes.get_errno()
            if failure != errno.ENOENT:  # a mount point hidden under a later mount
                raise OSError(failure, f"cannot make {target} read-only")


def _own_tasks(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def _limits(cpu_s: int, nproc: int, seccomp: ctypes.Structure | None) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    if seccomp is not None:
        libc = _libc()
        if (
            libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            or libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(seccomp), 0, 0) != 0
        ):
            raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


class _SockFilter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32))  # fmt: skip


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def _no_unix_sockets_filter() -> _SockFprog | None:
    """A seccomp filter (classic BPF, no library needed) that refuses socket(AF_UNIX, ...) and
    io_uring (which can make sockets too) with EPERM, and kills a process that calls another
    architecture's system calls (the i386 or x32 ABI, with other numbers). A new network
    namespace does not stop a Unix socket in the filesystem an agent listens on; socketpair()
    still works (it reaches nothing). None on a machine it does not know."""
    known = _SECCOMP_ARCHES.get(os.uname().machine)
    if known is None:
        return None
    arch, socket_nr, io_uring_nrs, max_nr = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    refuse = _SECCOMP_RET_ERRNO | errno.EPERM
    program = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jge, 0, 1, max_nr),
        (ret, 0, 0, _SECCOMP_RET_KILL_PROCESS),
    ]
    for nr in io_uring_nrs:
        program += [(jeq, 0, 1, nr), (ret, 0, 0, refuse)]
    program += [
        (jeq, 0, 3, socket_nr),
        (ld, 0, 0, 16),  # the low half of seccomp_data.args[0]: the family
        (jeq, 0, 1, socket.AF_UNIX),
        (ret, 0, 0, refuse),
        (ret, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*op) for op in program))
    return _SockFprog(len(program), filters)  # it holds `filters` (ctypes keeps the array)


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
    work = json.loads(sys.stdin.buffer.read())
    uid, gid = config["uid"], config["gid"]
    timeout_s = float(config["timeout_s"])
    libc = _libc()
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"error": "cannot become a child subreaper"}
    # Not dumpable (the judge, forked from here, inherits it): a process of the same user
    # (the program, where the platform is not root) may not trace us or open our descriptors.
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return {"error": "cannot make the launcher undumpable"}
    folder, isolation, remove = _private_folder(
        uid, gid, allow_unconfined=config.get("allow_unconfined") is True
    )
    judge_pid = verdict_fd = None
    judged = False
    try:
        script = folder / "answer.py"
        script.write_bytes(work["program"].encode("utf-8", "replace"))
        command = [config["python"], "-I", "-B", str(script)]
        pass_fds: tuple[int, ...] = ()
        deadline = time.monotonic() + timeout_s
        if work["asserts"] is not None:
            host = folder / "host.py"
            host.write_bytes(Path(code_judge.__file__).read_bytes())
            judge_pid, verdict_fd, pass_fds = _start_judge(work, config, deadline)
            command = [config["python"], "-I", "-B", str(host), str(script), *map(str, pass_fds)]
        if uid is not None:
            for path in (folder, *folder.iterdir()):
                os.chown(path, uid, gid)
        folder.chmod(0o700)
        nproc = MAX_PROCESSES if uid is not None else _own_tasks(os.geteuid()) + MAX_PROCESSES
        if isolation.endswith("its own process limit"):
            nproc = SHARED_NPROC_BACKSTOP
        no_unix_sockets = _no_unix_sockets_filter()
        if no_unix_sockets is None and not config.get("allow_unconfined"):
            return {"error": f"no seccomp filter for this machine ({os.uname().machine})"}
        extra = {"user": uid, "group": gid, "extra_groups": []} if uid is not None else {}
        # The wall clock is the limit that speaks; the CPU limit, a second above it, is the
        # backstop should this launcher be starved of the CPU itself.
        cpu_s = max(1, int(timeout_s + 0.999)) + 1
        try:
            process = subprocess.Popen(
                command,
                cwd=folder,
                env={"PATH": SAFE_PATH},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
                preexec_fn=lambda: _limits(cpu_s, nproc, no_unix_sockets),  # noqa: PLW1509
                **extra,
            )
        except OSError as failed:
            return {"error": f"cannot start the program: {failed}"}
        finally:
            for fd in pass_fds:
                os.close(fd)
        head, tail, truncated, timed_out, verdict = _read(process, deadline, verdict_fd)
        if judge_pid is not None:  # before anything else may reap it (and free its pid)
            _end(judge_pid)
            judged, judge_pid = True, None
        if not timed_out:
            try:  # its output ended before it did
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        _kill_everything(process.pid)
        returncode = None if timed_out else process.wait()
        if returncode == -signal.SIGXCPU:  # it spent its time on the CPU instead of the clock
            returncode, timed_out = None, True
        passed, reason = _verdict(verdict) if judged else (None, "")
        return {
            "returncode": returncode,
            "output": base64.b64encode(head).decode(),
            "tail": base64.b64encode(tail).decode(),
            "truncated": truncated,
            "timed_out": timed_out,
            "user": config["user"],
            "isolation": isolation,
            "passed": passed,
            "verdict": reason,
        }
    finally:
        if judge_pid is not None:
            _end(judge_pid)
        if verdict_fd is not None:
            os.close(verdict_fd)
        if remove is not None:
            shutil.rmtree(remove, ignore_errors=True)


def _start_judge(work: dict, config: dict, deadline: float) -> tuple[int, int, tuple[int, int]]:
    """Fork the judge (code_judge.judge) as the verdict user: (its pid, the descriptor its
    verdict arrives on, the program's ends of the two pipes between them)."""
    asserts, setup = work["asserts"], work["setup"]
    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the judge
        try:
            keep = {calls_w, replies_r, verdict_w}
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            for name in os.listdir("/proc/self/fd"):
                if int(name) > 2 and int(name) not in keep:
                    with contextlib.suppress(OSError):
                        os.close(int(name))
            for module in _modules_of(setup) + _modules_of(asserts):  # unreadable to its user
                with contextlib.suppress(Exception):
                    importlib.import_module(module)
            if config["verdict_uid"] is not None:
                os.setgroups([])
                os.setresgid(*[config["verdict_gid"]] * 3)
                os.setresuid(*[config["verdict_uid"]] * 3)
            _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # again: a uid change may reset it
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            verdict = code_judge.judge(
                asserts, calls_w, replies_r, deadline - JUDGE_MARGIN_S,
                setup=setup, answer_names=tuple(work["answer_names"]),
            )  # fmt: skip
            os.write(verdict_w, json.dumps(verdict).encode()[:VERDICT_BYTES])
        finally:
            os._exit(0)
    for fd in (calls_w, replies_r, verdict_w):
        os.close(fd)
    return pid, verdict_r, (calls_r, replies_w)


def _end(pid: int) -> None:
    """Kill and reap a child that nothing else has reaped yet."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _modules_of(asserts: str) -> list[str]:
    try:
        return code_judge.imported_modules(asserts)
    except (SyntaxError, ValueError):
        return []  # the judge fails them


def _verdict(data: bytes) -> tuple[bool, str]:
    try:
        verdict = json.loads(data)
        return verdict["passed"] is True, str(verdict["reason"])
    except (ValueError, TypeError, KeyError):
        return False, "the judge gave no verdict"


def _read(
    process: subprocess.Popen, deadline: float, verdict_fd: int | None
) -> tuple[bytes, bytes, bool, bool, bytes]:
    """Read until the program exits (or its output ends) and the judge's verdict is in, or the
    time limit; keep the head and the tail of the output. A child left holding the pipe does not
    keep us waiting, nor does a program that lingers after the verdict."""
    fd = process.stdout.fileno()  # type: ignore[union-attr]
    head, tail, truncated, verdict = bytearray(), bytearray(), False, bytearray()
    exited_at: float | None = None
    program_done, verdict_done = False, verdict_fd is None
    verdict_at: float | None = None
    while not (program_done and verdict_done):
        now = time.monotonic()
        if now >= deadline or (verdict_at is not None and now - verdict_at > VERDICT_GRACE_S):
            return bytes(head), bytes(tail), truncated, True, bytes(verdict)
        if exited_at is None and process.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.2:
            program_done = True
        watched = [fd] if not program_done else []
        if verdict_fd is not None and not verdict_done:
            watched.append(verdict_fd)
        ready, _, _ = select.select(watched, [], [], min(0.05, deadline - now))
        for source in ready:
            try:
                chunk = os.read(source, 65536)
            except OSError as failed:
                if failed.errno == errno.EINTR:
                    continue
                chunk = b""
            if source == verdict_fd:
                verdict += chunk[: VERDICT_BYTES - len(verdict)]
                if not chunk:
                    verdict_done, verdict_at = True, time.monotonic()
                continue
            if not chunk:
                program_done = True
                continue
            room = OUTPUT_CAP_BYTES - len(head)
            head += chunk[:room]
            truncated = truncated or len(chunk) > room
            tail = (tail + chunk)[-TAIL_BYTES:]
    return bytes(head), bytes(tail), truncated, False, bytes(verdict)


if __name__ == "__main__":
    try:
        outcome = _launch(json.loads(sys.argv[1]))
    except Exception as failed:  # noqa: BLE001 (the platform's side raises it)
        outcome = {"error": f"{type(failed).__name__}: {failed}"}
    sys.stdout.write(json.dumps(outcome))
