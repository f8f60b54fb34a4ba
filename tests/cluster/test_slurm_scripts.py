"""infra/slurm/setup.sh and stop.sh signal only the daemons they recorded, and only while each
PID still is that daemon: a daemon that exits after TERM may leave its PID to another process,
which must not get the KILL meant for the daemon.

The scripts' step functions are run with a state file of the test's own, naming stand-in
processes (no Slurm needed)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.workers import worker_name

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


# slurmdbd's association table, as far as the tree check reads it: root, the agents' parent,
# agent a with its user, agent b with its user.
TREE = [
    (1, "root", "", 1, 12, ""),
    (2, "agents", "", 2, 11, "root"),
    (3, "agent_a", "", 3, 6, "agents"),
    (4, "agent_a", "agent_a", 4, 5, ""),
    (5, "agent_b", "", 7, 10, "agents"),
    (6, "agent_b", "agent_b", 8, 9, ""),
]


@pytest.fixture
def association_table() -> Iterator[Callable[[list[tuple[object, ...]]], None]]:
    database = f"arena_tree_{worker_name('check')}"

    def sql(statement: str) -> None:
        subprocess.run(["mysql", "-e", statement], check=True, timeout=30)

    sql(f"DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database}")

    def fill(rows: list[tuple[object, ...]]) -> None:
        values = ",".join(
            f"({i}, '{a}', '{u}', {lft}, {rgt}, '{p}', 0)" for i, a, u, lft, rgt, p in rows
        )
        sql(
            f"CREATE TABLE {database}.t_assoc_table (id_assoc INT, acct TEXT, user TEXT, lft INT,"
            f" rgt INT, parent_acct TEXT, deleted INT); INSERT INTO {database}.t_assoc_table VALUES {values}"
        )

    fill.database = database  # type: ignore[attr-defined]
    yield fill
    sql(f"DROP DATABASE IF EXISTS {database}")


def check_tree(database: str) -> subprocess.CompletedProcess[str]:
    command = (
        f"source {ROOT / 'infra/slurm/setup.sh'}; DB_NAME={database}; CLUSTER=t; "
        "check_association_tree"
    )
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)


def test_a_whole_association_tree_passes_the_check(association_table):
    association_table(TREE)
    assert check_tree(association_table.database).returncode == 0


def test_a_user_nested_in_another_agents_account_is_named(association_table):
    # agent_b's user inside agent_a's range: closing agent_a would close agent_b too.
    association_table(
        [
            *TREE[:2],
            (3, "agent_a", "", 3, 8, "agents"),
            (4, "agent_a", "agent_a", 4, 5, ""),
            (6, "agent_b", "agent_b", 6, 7, ""),
            (5, "agent_b", "", 9, 10, "agents"),
        ]
    )
    done = check_tree(association_table.database)
    assert done.returncode == 1
    assert "association tree is inconsistent" in done.stdout + done.stderr
    assert "agent_b/agent_b lies in agent_a" in done.stdout + done.stderr
