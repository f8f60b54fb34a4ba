"""infra/slurm/setup.sh and stop.sh signal only the daemons they recorded, and only while each
PID still is that daemon: a daemon that exits after TERM may leave its PID to another process,
which must not get the KILL meant for the daemon.

The scripts' step functions are run with a state file of the test's own, naming stand-in
processes (no Slurm needed)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Calls itself DAEMON; on TERM it turns into "unrelated" and goes on running, as if the daemon
# had exited and an unrelated process had been given its PID.
STAND_IN = """
import signal, sys, time
def rename(name):
    with open("/proc/self/comm", "w") as comm:
        comm.write(name)
rename(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: rename("unrelated"))
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def stand_ins() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def stand_in(started: list[subprocess.Popen[str]], comm: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, comm], stdout=subprocess.PIPE, text=True
    )
    started.append(process)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def comm(process: subprocess.Popen[str]) -> str:
    return Path(f"/proc/{process.pid}/comm").read_text().strip()


def run_step(script: str, state: Path, step: str) -> str:
    """Source `script`, point it at `state` with a 1 s wait before KILL, and run `step`."""
    command = f"source {ROOT / 'infra/slurm' / script}; STARTED={state}; STOP_WAIT_STEPS=5; {step}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    ("script", "step"),
    [("stop.sh", "stop_group slurmctld"), ("setup.sh", "restart_changed_daemons")],
)
def test_a_pid_that_stopped_being_the_daemon_after_term_gets_no_kill(
    script, step, tmp_path, stand_ins
):
    daemon = stand_in(stand_ins, "slurmctld")
    state = tmp_path / "started"
    state.write_text(f"slurmctld {daemon.pid}\n")

    output = run_step(script, state, step)

    assert daemon.poll() is None, f"the PID's new owner was killed:\n{output}"
    assert comm(daemon) == "unrelated"  # it did get the TERM, meant for the daemon
    assert "KILL" not in output
    assert state.read_text() == ""  # forgotten


def test_setup_does_not_signal_a_recorded_pid_that_is_not_the_daemon(tmp_path, stand_ins):
    stranger = stand_in(stand_ins, "sleep")  # the slurmd that was recorded is long gone
    state = tmp_path / "started"
    state.write_text(f"slurmd-n1 {stranger.pid}\n")

    run_step("setup.sh", state, "restart_changed_daemons")

    assert stranger.poll() is None and comm(stranger) == "sleep"  # not even TERMed
    assert state.read_text() == ""


@pytest.mark.parametrize(
    ("script", "step"),
    [("stop.sh", "stop_group slurmctld"), ("setup.sh", "restart_changed_daemons")],
)
def test_a_daemon_that_ignores_term_is_killed(script, step, tmp_path, stand_ins):
    stubborn = subprocess.Popen(
        [sys.executable, "-c", STAND_IN.replace('rename("unrelated")', "None"), "slurmctld"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    stand_ins.append(stubborn)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    state = tmp_path / "started"
    state.write_text(f"slurmctld {stubborn.pid}\n")

    output = run_step(script, state, step)

    assert stubborn.wait(timeout=10) == -9, output
    assert "did not exit: KILL" in output
