"""What holds one agent run to its CPU, memory and process limits, and ends all of it at once.

One small interface, `RunLimits`, with three implementations, picked by what the host has
(setting AGENTS_RUNS_LIMITS, default "auto"):

- `Cgroup2Limits`: a cgroup v2 group `<root>/run-<id>` (memory.max with no swap, pids.max,
  cpu.max); `cgroup.kill` ends every process in it, forked or setsid'd alike.
- `Cgroup1Limits`: the same groups in the v1 hierarchies (memory, pids, cpu, cpuacct, and the
  freezer to stop a fork race while killing).
- `RlimitLimits`: no cgroups at all. Per-process rlimits (address space, processes of the user)
  and, to end a run, every process of the agent's Unix user on this host: weaker, and says so.

The names are fixed by the run's id, so a supervisor or keeper started later finds the group of
a run it did not create. `preexec()` is called in the child between fork and exec (as
`subprocess.Popen(preexec_fn=...)`): it only writes to files opened by path and calls
setrlimit, nothing that takes a lock another thread may hold.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
KILL_ROUNDS = 50  # a group that still has processes after this many SIGKILL rounds is reported


class LimitsError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunLimitValues:
    cpus: float
    memory_mib: int
    max_processes: int


@dataclass(frozen=True)
class Usage:
    memory_bytes: int | None
    processes: int | None
    cpu_seconds: float | None


class RunLimits(ABC):
    kind: str = ""
    # In words, for the run's record and `agents runs`: how strong this is.
    description: str = ""

    def __init__(
        self, run_id: int, values: RunLimitValues, *, unix_user: str = "", root: str | None = None
    ) -> None:
        self.run_id = run_id
        self.values = values
        self.unix_user = unix_user
        if root is None:
            from django.conf import settings  # not at import: the keeper runs without Django

            root = settings.AGENTS_RUNS_CGROUP_ROOT
        self.name = f"{root}/run-{run_id}"

    @classmethod
    def for_run(cls, run_id: int) -> RunLimits:
        """The limits of a run as recorded, on this host's mechanism. Call it in the parent,
        before forking: it reads the database."""
        from agents.runs.models import AgentRun  # the model imports nothing from here

        run = AgentRun.objects.select_related("agent").get(pk=run_id)
        values = RunLimitValues(run.cpus, run.memory_mib, run.max_processes)
        return limits_for(run_id, values, unix_user=run.agent.unix_user)

    @abstractmethod
    def create(self) -> None:
        """Make (or reset) the run's group with its limits; idempotent."""

    @abstractmethod
    def preexec(self) -> None:
        """In the child before exec: join the run's group and take its rlimits."""

    @abstractmethod
    def members(self) -> list[int]:
        """The pids in the run's group now."""

    @abstractmethod
    def kill_all(self, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to every process of the run; with SIGKILL, until none is left.
        Returns how many processes were signalled."""

    @abstractmethod
    def usage(self) -> Usage: ...

    @abstractmethod
    def remove(self) -> None:
        """End whatever is left and delete the group."""

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed at its memory limit."""
        return 0

    def _rlimits(self) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core dumps of the run's memory


def limits_for(
    run_id: int,
    values: RunLimitValues,
    *,
    unix_user: str = "",
    kind: str | None = None,
    root: str | None = None,
) -> RunLimits:
    if kind is None:
        from django.conf import settings

        kind = settings.AGENTS_RUNS_LIMITS
    if kind == "auto":
        kind = available_kind()
    implementations: dict[str, type[RunLimits]] = {
        "cgroup2": Cgroup2Limits,
        "cgroup1": Cgroup1Limits,
        "rlimits": RlimitLimits,
    }
    if kind not in implementations:
        raise LimitsError(f"AGENTS_RUNS_LIMITS={kind!r}: auto, cgroup2, cgroup1 or rlimits")
    return implementations[kind](run_id, values, unix_user=unix_user, root=root)


def available_kind() -> str:
    if (CGROUP_MOUNT / "cgroup.controllers").exists():
        return "cgroup2"
    if all(
        os.access(CGROUP_MOUNT / controller, os.W_OK) for controller in Cgroup1Limits.CONTROLLERS
    ):
        return "cgroup1"
    return "rlimits"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _signal_each(pids: list[int], sig: int) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            pass
    return sent


def _join(procs_file: Path) -> None:
    fd = os.open(procs_file, os.O_WRONLY)
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)


class Cgroup2Limits(RunLimits):
    kind = "cgroup2"
    description = "cgroup v2: memory (no swap), processes and CPU of the whole run"

    @property
    def path(self) -> Path:
        return CGROUP_MOUNT / self.name

    def create(self) -> None:
        # Each level must hand the controllers down to the next.
        level = CGROUP_MOUNT
        for part in Path(self.name).parts:
            _write(level / "cgroup.subtree_control", "+memory +pids +cpu")
            level = level / part
            level.mkdir(mode=0o755, exist_ok=True)
        memory = self.values.memory_mib * 1024 * 1024
        _write(self.path / "memory.max", str(memory))
        if (self.path / "memory.swap.max").exists():
            _write(self.path / "memory.swap.max", "0")
        _write(self.path / "pids.max", str(self.values.max_processes))
        quota = max(1000, int(self.values.cpus * CPU_PERIOD_US))
        _write(self.path / "cpu.max", f"{quota} {CPU_PERIOD_US}")

    def preexec(self) -> None:
        _join(self.path / "cgroup.procs")
        self._rlimits()

    def members(self) -> list[int]:
        return _pids(self.path / "cgroup.procs")

    def kill_all(self, sig: int = signal.SIGKILL) -> int:
        pids = self.members()
        if sig == signal.SIGKILL and (self.path / "cgroup.kill").exists():
            _write(self.path / "cgroup.kill", "1")
            _wait_empty(self.members)
            return len(pids)
        if sig != signal.SIGKILL:
            return _signal_each(pids, sig)
        return _kill_until_empty(self.members, freeze=self._freeze)

    def _freeze(self, frozen: bool) -> None:
        if (self.path / "cgroup.freeze").exists():
            _write(self.path / "cgroup.freeze", "1" if frozen else "0")

    def usage(self) -> Usage:
        cpu_usec = None
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    cpu_usec = int(value)
        except (OSError, ValueError):
            pass
        return Usage(
            memory_bytes=_read_int(self.path / "memory.current"),
            processes=_read_int(self.path / "pids.current"),
            cpu_seconds=None if cpu_usec is None else cpu_usec / 1e6,
        )

    def oom_kills(self) -> int:
        return _counter(self.path / "memory.events", "oom_kill")

    def remove(self) -> None:
        if self.path.exists():
            self.kill_all()
            _rmdir(self.path)


class Cgroup1Limits(RunLimits):
    kind = "cgroup1"
    description = "cgroup v1: memory (no swap), processes and CPU of the whole run"
    CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")

    def _path(self, controller: str) -> Path:
        return CGROUP_MOUNT / controller / self.name

    def _controllers(self) -> list[str]:
        # The freezer, where mounted, holds a fork bomb still while it is killed.
        extra = ["freezer"] if (CGROUP_MOUNT / "freezer").is_dir() else []
        return [*self.CONTROLLERS, *extra]

    def create(self) -> None:
        for controller in self._controllers():
            self._path(controller).mkdir(mode=0o755, parents=True, exist_ok=True)
        memory = self._path("memory")
        limit = str(self.values.memory_mib * 1024 * 1024)
        # memsw (memory + swap) may only be raised above memory.limit: set memory first when
        # lowering, memsw first when raising; equal values mean no swap at all.
        memsw = memory / "memory.memsw.limit_in_bytes"
        for attempt in range(2):
            try:
                _write(memory / "memory.limit_in_bytes", limit)
                if memsw.exists():
                    _write(memsw, limit)
                break
            except OSError:
                if attempt == 1 or not memsw.exists():
                    raise
                _write(memsw, limit)
        _write(self._path("pids") / "pids.max", str(self.values.max_processes))
        quota = max(1000, int(self.values.cpus * CPU_PERIOD_US))
        _write(self._path("cpu") / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(self._path("cpu") / "cpu.cfs_quota_us", str(quota))

    def preexec(self) -> None:
        for controller in self._controllers():
            _join(self._path(controller) / "cgroup.procs")
        self._rlimits()

    def members(self) -> list[int]:
        return _pids(self._path("pids") / "cgroup.procs")

    def kill_all(self, sig: int = signal.SIGKILL) -> int:
        if sig != signal.SIGKILL:
            return _signal_each(self.members(), sig)
        return _kill_until_empty(self.members, freeze=self._freeze)

    def _freeze(self, frozen: bool) -> None:
        state = self._path("freezer") / "freezer.state"
        if state.exists():
            _write(state, "FROZEN" if frozen else "THAWED")

    def usage(self) -> Usage:
        cpu_ns = _read_int(self._path("cpuacct") / "cpuacct.usage")
        return Usage(
            memory_bytes=_read_int(self._path("memory") / "memory.usage_in_bytes"),
            processes=_read_int(self._path("pids") / "pids.current"),
            cpu_seconds=None if cpu_ns is None else cpu_ns / 1e9,
        )

    def oom_kills(self) -> int:
        return _counter(self._path("memory") / "memory.oom_control", "oom_kill")

    def remove(self) -> None:
        if self._path("pids").exists():
            self.kill_all()
        for controller in self._controllers():
            if self._path(controller).exists():
                _rmdir(self._path(controller))


class RlimitLimits(RunLimits):
    kind = "rlimits"
    description = (
        "rlimits only (no cgroups on this host): memory per process, processes per user, no CPU"
        " limit; stopping a run ends every process of the agent's user on this host"
    )

    def create(self) -> None:
        pass

    def preexec(self) -> None:
        memory = self.values.memory_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        procs = self.values.max_processes
        resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
        self._rlimits()

    def members(self) -> list[int]:
        if not self.unix_user:
            return []
        try:
            uid = pwd.getpwnam(self.unix_user).pw_uid
        except KeyError:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}").st_uid == uid:
                        found.append(int(entry))
                except OSError:
                    pass
        return found

    def kill_all(self, sig: int = signal.SIGKILL) -> int:
        if sig != signal.SIGKILL:
            return _signal_each(self.members(), sig)
        return _kill_until_empty(self.members, freeze=None)

    def usage(self) -> Usage:
        return Usage(memory_bytes=None, processes=len(self.members()), cpu_seconds=None)

    def remove(self) -> None:
        self.kill_all()


def _kill_until_empty(
    members: Callable[[], list[int]], *, freeze: Callable[[bool], None] | None
) -> int:
    """SIGKILL every member, again and again, until none is left: a process forked between
    reading the list and the kill is caught by the next round (the freezer stops that race
    where there is one)."""
    sent = 0
    for _ in range(KILL_ROUNDS):
        pids = members()
        if not pids:
            return sent
        if freeze is not None:
            try:
                freeze(True)
                pids = members()
            except OSError:
                pass
        sent += _signal_each(pids, signal.SIGKILL)
        if freeze is not None:  # killed processes only die once thawed
            with contextlib.suppress(OSError):
                freeze(False)
        time.sleep(0.05)
    if members():
        raise LimitsError(f"processes outlived {KILL_ROUNDS} rounds of SIGKILL")
    return sent


def _wait_empty(members: Callable[[], list[int]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while members() and time.monotonic() < deadline:
        time.sleep(0.05)


def _rmdir(path: Path) -> None:
    """A group's folder goes once its last process is reaped, which can lag the kill a bit."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    path.rmdir()
