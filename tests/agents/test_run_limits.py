"""The limits' mechanisms on their own, with plain processes: the cgroup v2 group (on the v2
hierarchy this machine mounts beside v1, which has no memory controller, so only joining and
ending are checked here), the rlimit fallback, and naming a process by pid and start time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.runs import limits as run_limits
from agents.runs.limits import Cgroup2Limits, RlimitLimits, RunLimitValues, limits_for
from agents.runs.processes import alive, start_time

UNIFIED = Path("/sys/fs/cgroup/unified")
VALUES = RunLimitValues(cpus=1.0, memory_mib=64, max_processes=32)


@pytest.mark.skipif(
    not (UNIFIED / "cgroup.procs").exists() or os.geteuid() != 0, reason="no v2 hierarchy"
)
def test_a_cgroup2_group_ends_every_process_it_holds_setsid_included(monkeypatch):
    monkeypatch.setattr(run_limits, "CGROUP_MOUNT", UNIFIED)
    group = Cgroup2Limits(7, VALUES, root=f"rsi-arena-limits-test-{os.getpid()}")
    group.path.mkdir(parents=True)  # create() also sets memory, pids and cpu: not here
    try:
        shell = subprocess.Popen(
            ["sh", "-c", "setsid sleep 300 & (sleep 301 &); sleep 302 & wait"],
            preexec_fn=group.preexec,
        )
        deadline = time.monotonic() + 10
        while len(group.members()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group.members()) == 4

        group.kill_all()

        assert group.members() == []
        assert shell.wait(timeout=10) != 0
        group.remove()
        assert not group.path.exists()
    finally:
        for folder in (group.path, group.path.parent):
            if folder.exists():
                folder.rmdir()


def test_the_rlimit_fallback_holds_a_process_to_its_memory_and_says_it_is_weaker():
    fallback = limits_for(8, VALUES, kind="rlimits", root="unused")
    assert isinstance(fallback, RlimitLimits) and "no cgroups" in fallback.description
    assert "every process of the agent's user" in fallback.description
    hog = subprocess.run(
        [sys.executable, "-c", "b = bytearray(256 << 20); print('survived')"],
        preexec_fn=fallback.preexec,
        capture_output=True,
        text=True,
    )
    assert hog.returncode != 0 and "MemoryError" in hog.stderr


def test_a_process_is_named_by_pid_and_start_time_so_a_recycled_pid_is_not_it():
    child = subprocess.Popen(["sleep", "30"])
    started = start_time(child.pid)
    assert started is not None and alive(child.pid, started)
    assert not alive(child.pid, started + 1)  # the same pid, started at another time
    child.kill()
    time.sleep(0.2)  # not reaped yet: a zombie has ended its work
    assert not alive(child.pid, started)
    child.wait()
    assert start_time(child.pid) is None
