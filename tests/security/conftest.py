"""Agents played by real Unix users, and a way to call the platform that survives a hang.

An attack runs as the agent's own user (`runuser`), in its own sandbox, exactly as the agent's
shell or job would; the platform then does its usual work as root, and the test checks what
root touched. Root-owned canaries stand in for `/etc/passwd` and secret keys.
"""

from __future__ import annotations

import contextlib
import pwd
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.sandboxes import UnixSandboxes
from agents.services import Provisioned, agent_deprovision, agent_provision
from tests.support.workers import agent_user, worker_path

SANDBOX_ROOT = worker_path("/tmp/arena-sandboxes-security")
CANARY_TEXT = "root's secret: the platform must never show, change or give away this file\n"


@dataclass(frozen=True)
class Player:
    """A provisioned agent and a shell as its Unix user."""

    provisioned: Provisioned

    @property
    def user(self) -> str:
        return self.provisioned.agent.unix_user

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid

    @property
    def home(self) -> Path:
        return Path(self.provisioned.agent.sandbox)

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run `script` with `sh` as the agent, in its home; the agent's own powers only."""
        return subprocess.run(
            ["runuser", "-u", self.user, "--", "env", f"HOME={self.home}", "sh", "-c", script],
            cwd=self.home, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def attack(self, script: str) -> None:
        done = self.shell(script)
        assert done.returncode == 0, f"the attack itself failed: {done.stderr}"


@pytest.fixture
def sandboxes() -> UnixSandboxes:
    return UnixSandboxes(SANDBOX_ROOT)


@pytest.fixture
def players(sandboxes: UnixSandboxes, slurm) -> Iterator[Callable[[str], Player]]:
    """`players("sec_x")` provisions agent sec_x (Unix user agent_sec_x, agent_w0_sec_x on
    xdist worker 0); all are deprovisioned
    after the test."""
    made: list[str] = []

    def provision(name: str) -> Player:
        # A fresh sandbox: an earlier test's attack files must not help or hinder this one.
        # `rm`, not shutil.rmtree: a test leaves a folder 2000 deep, past Python's recursion.
        subprocess.run(["rm", "-rf", str(SANDBOX_ROOT / agent_user(name))], check=True)
        done = agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        made.append(name)
        return Player(done)

    yield provision
    for name in made:
        agent_deprovision(name=name, sandboxes=sandboxes, backend=slurm)


@pytest.fixture
def exposed() -> Iterator[Path]:
    """A root folder under /tmp that agents can pass through (0755), as /etc is."""
    folder = Path(tempfile.mkdtemp(prefix="arena-security-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def canary(exposed: Path) -> Path:
    """A root-owned, root-only file where agents could name it, as /etc/shadow is."""
    path = exposed / "canary"
    path.write_text(CANARY_TEXT)
    path.chmod(0o600)
    return path


def assert_canary_untouched(path: Path) -> None:
    info = path.lstat()
    assert path.read_text() == CANARY_TEXT
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (0, 0, 0o600)


class Hung(AssertionError):
    pass


@contextlib.contextmanager
def bounded(*, seconds: int = 20, memory_mib: int = 1024) -> Iterator[None]:
    """At most `seconds` of time and `memory_mib` more memory than now for the block. A hang
    (a FIFO opened for reading) or a read with no end (`/dev/zero`) fails the test with Hung
    or MemoryError instead of taking the machine down."""

    def timed_out(signum: int, frame: object) -> None:
        raise Hung(f"still running after {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space_bytes() + memory_mib * 1024**2
    previous = signal.signal(signal.SIGALRM, timed_out)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)


def _address_space_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")
