"""`manage.py demo` stopped with SIGTERM while its agents train: it cancels the jobs it started
on the local cluster, ends its agents' processes and model servers, says so, and exits
non-zero; afterwards nothing it started is running.

It runs the real command in its own process on the embedded defaults (its own SQLite database
and local cluster in a temporary var/), with the tiny models the suite already built.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from arena.phases.demo import DEMO_AGENTS
from tests.conftest import ROOT, TEST_MODELS_DIR

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _processes_of(users: list[str]) -> list[str]:
    uids = set()
    for user in users:
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            continue
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if entry.stat().st_uid in uids and stat[stat.rindex(")") + 2] != "Z":
                found.append(f"{entry.name} {stat[: stat.rindex(')') + 1]}")
        except OSError:
            continue
    return found


def test_a_demo_stopped_while_its_agents_train_leaves_nothing_running(tiny_models, tmp_path):
    if not settings.AGENTS_TRAIN_PYTHON.is_file():
        pytest.fail(
            f"no training environment at {settings.AGENTS_TRAIN_PYTHON} (make test builds it)"
        )
    var = tmp_path / "var"
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
        "ARENA_VAR_DIR": str(var),
        "ARENA_MODELS_DIR": str(TEST_MODELS_DIR),
        "PYTHONUNBUFFERED": "1",
    }
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--exit", "--port", str(_free_port())],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert demo.stdout is not None
    output: list[str] = []
    jobs = var / "local-jobs" / "jobs"
    deadline = time.monotonic() + 600
    try:
        # Wait until the agents' training jobs run on the local cluster.
        for line in demo.stdout:
            output.append(line)
            running = [j for j in jobs.glob("*") if (j / "pid").exists()] if jobs.is_dir() else []
            if "submitted job" in line.lower() or len(running) >= 1:
                break
            assert time.monotonic() < deadline, "".join(output[-40:])
        else:
            pytest.fail("the demo ended before its agents trained:\n" + "".join(output[-60:]))
        time.sleep(2)
        assert _processes_of([f"agent_{name}" for name in DEMO_AGENTS]), "agents are at work"
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=120)
        output.append(rest)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    text = "".join(output)
    assert demo.returncode != 0, text[-3000:]
    assert "interrupted before the end" in text, text[-3000:]
    assert "stopped cleanly: nothing the demo started is still running" in text, text[-3000:]
    assert not _processes_of([f"agent_{name}" for name in DEMO_AGENTS])
    assert jobs.is_dir() and list(jobs.iterdir()), "the agents had submitted jobs"
    for job in jobs.iterdir():
        assert (job / "cancelled").exists() or (job / "end").exists(), job
