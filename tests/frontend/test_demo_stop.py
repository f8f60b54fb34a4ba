"""How `manage.py demo` stops, and what it then says and exits with.

Stopped with SIGTERM while its agents train, it cancels the jobs it started on the local
cluster, ends its agents' processes and model servers, says so, and exits non-zero; afterwards
nothing it started is running. That test runs the real command in its own process on the
embedded defaults (the checkout's var/arena.sqlite3, an earlier one kept aside, and a local
cluster in a temporary var/), with the tiny models the suite already built, for minutes; the
checkout's database is put back as it was afterwards.

Stopped with Ctrl-C (SIGINT) or SIGTERM once it has given its verdict and keeps the site up for
a person, a demo that worked exits 0 and says it had finished and stopped cleanly; one whose
checks failed exits non-zero with why, as it does with --exit. These run the same command in its own process, on an
empty SQLite database and var/ of their own, its competition replaced by a stand-in that
records its checks at once (tests/frontend/demo_stand_in.py): seconds each, not minutes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from arena.phases.demo import DEMO_AGENTS
from tests.conftest import ROOT, TEST_MODELS_DIR
from tests.frontend.demo_stand_in import CHECKS, FAILED_CHECK, UNDER_WAY
from tests.support.workers import agent_user


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


@pytest.fixture
def checkout_database_put_back(tmp_path: Path) -> Iterator[None]:
    """The demo on the embedded defaults starts on the checkout's var/arena.sqlite3 (an earlier
    one renamed `.previous`, replacing the one before). Both are kept here and put back after
    the test, so nothing later (a person's demo, CI's checks) finds this stopped demo's agents
    in place of its own."""
    database = ROOT / "var" / "arena.sqlite3"
    paths = [database, database.with_name(database.name + ".previous")]
    kept = tmp_path / "checkout-database"
    kept.mkdir()
    for path in paths:
        if path.exists():
            shutil.move(path, kept / path.name)
    yield
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        if (kept / path.name).exists():
            shutil.move(kept / path.name, path)


@pytest.mark.slow
@pytest.mark.serial  # the whole demo, with its agents, and the checkout's own demo database
@pytest.mark.usefixtures("checkout_database_put_back")
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
        assert _processes_of([agent_user(name) for name in DEMO_AGENTS]), "agents are at work"
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
    assert not _processes_of([agent_user(name) for name in DEMO_AGENTS])
    assert jobs.is_dir() and list(jobs.iterdir()), "the agents had submitted jobs"
    for job in jobs.iterdir():
        assert (job / "cancelled").exists() or (job / "end").exists(), job


# --- on a stand-in competition ----------------------------------------------------------------
SERVING = "Ctrl-C stops everything"  # the demo's last line before it serves until stopped


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stand_in_demo(
    tmp_path: Path, mode: str, *options: str, sigint_ignored: bool = False
) -> subprocess.Popen[str]:
    """The demo command on a stand-in competition; `sigint_ignored`: started as a script's
    background job is, with SIGINT ignored (which Python keeps unless told otherwise)."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "REDIS_URL"},
        "ARENA_VAR_DIR": str(tmp_path / "var"),
        # An empty SQLite database of its own (the embedded default is the checkout's
        # var/arena.sqlite3, whatever ARENA_VAR_DIR says), and its own agent gateway port:
        # another demo, or another test's, may hold the defaults.
        "DATABASE_URL": f"sqlite:///{tmp_path / 'arena.sqlite3'}",
        "AGENTS_GATEWAY_PORT": str(_free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.frontend.demo_stand_in", mode,
         "--port", str(_free_port()), *options],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, preexec_fn=_ignore_sigint if sigint_ignored else None,
    )  # fmt: skip


def _run(demo: subprocess.Popen[str], *, stop_at: str | None, stop: int = signal.SIGTERM) -> str:
    """The demo's whole output; sent `stop` once it has printed `stop_at`. Killed after two
    minutes, whatever it is doing."""
    assert demo.stdout is not None
    watchdog = threading.Timer(120, os.killpg, (demo.pid, signal.SIGKILL))
    watchdog.start()
    output: list[str] = []
    try:
        if stop_at is not None:
            for line in demo.stdout:
                output.append(line)
                if stop_at in line:
                    demo.send_signal(stop)
                    break
            else:
                demo.wait()
                pytest.fail(f"the demo ended before {stop_at!r}:\n" + "".join(output[-60:]))
        # Bounded: a site the demo failed to stop would hold its output open for ever.
        output.append(demo.communicate(timeout=150)[0])
    finally:
        watchdog.cancel()
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    return "".join(output)


@pytest.mark.parametrize(
    "stop, sigint_ignored",
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "ctrl-c-started-in-the-background", "sigterm"],
)
def test_a_demo_that_worked_and_is_then_stopped_exits_zero(tmp_path, stop, sigint_ignored):
    demo = _stand_in_demo(tmp_path, "pass", sigint_ignored=sigint_ignored)
    text = _run(demo, stop_at=SERVING, stop=stop)
    assert f"the demo worked: {CHECKS} checks passed, none failed" in text, text[-3000:]
    assert demo.returncode == 0, text[-3000:]
    assert f"the demo had finished ({CHECKS} checks passed); stopped cleanly" in text, text[-3000:]
    assert "stopped cleanly: nothing the demo started is still running" in text, text[-3000:]
    assert "interrupted before the end" not in text, text[-3000:]


def test_a_demo_whose_checks_failed_exits_non_zero_when_stopped(tmp_path):
    demo = _stand_in_demo(tmp_path, "fail")
    text = _run(demo, stop_at=SERVING, stop=signal.SIGINT)
    assert demo.returncode != 0, text[-3000:]
    assert f"CommandError: the demo did not work: {FAILED_CHECK}" in text, text[-3000:]
    assert "the demo had finished" not in text, text[-3000:]
    assert "interrupted before the end" not in text, text[-3000:]


@pytest.mark.parametrize(
    "mode, worked", [("pass", True), ("fail", False)], ids=["worked", "failed"]
)
def test_with_exit_a_demo_exits_by_its_verdict(tmp_path, mode, worked):
    demo = _stand_in_demo(tmp_path, mode, "--exit")
    text = _run(demo, stop_at=None)
    assert (demo.returncode == 0) is worked, text[-3000:]
    assert SERVING not in text, text[-3000:]
    assert ("CommandError: the demo did not work" in text) is not worked, text[-3000:]


def test_a_demo_stopped_before_its_verdict_exits_non_zero(tmp_path):
    demo = _stand_in_demo(tmp_path, "hang")
    text = _run(demo, stop_at=UNDER_WAY, stop=signal.SIGINT)
    assert demo.returncode != 0, text[-3000:]
    assert "CommandError: interrupted before the end: the demo did not finish" in text, text[-3000:]
    assert "stopped cleanly: nothing the demo started is still running" in text, text[-3000:]
    assert "the demo had finished" not in text, text[-3000:]
