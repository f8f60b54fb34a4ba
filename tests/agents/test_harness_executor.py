"""The harness's tools, played by a real agent Unix user: what the model asks for runs as the
agent, in its sandbox, with a clean environment; the OS refuses what the agent may not open;
output bombs are cut, timeouts kill what the command started even after setsid, and the working
directory never leaves the sandbox silently."""

from __future__ import annotations

import os
import pwd
import resource
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from agents.harness.executor import ToolExecutor
from agents.sandboxes import UnixSandboxes
from tests.support.workers import worker_name, worker_path

ROOT = worker_path("/tmp/arena-sandboxes-harness-exec")
USER = f"agent_{worker_name('hx_exec')}"  # its home is this worker's root: one per worker


@pytest.fixture(scope="module")
def home() -> Path:
    sandboxes = UnixSandboxes(ROOT)
    made = sandboxes.create(USER)
    yield made
    sandboxes.lock(USER)  # as deprovisioning does: no login, its processes ended
    sandboxes.remove(USER)


@pytest.fixture
def tools(home: Path) -> ToolExecutor:
    return ToolExecutor(unix_user=USER, home=home, python=str(settings.AGENTS_TRAIN_PYTHON))


def agent_processes() -> list[str]:
    listed = subprocess.run(
        ["ps", "-u", USER, "-o", "pid=,args="], capture_output=True, text=True, check=False
    )
    return [line for line in listed.stdout.splitlines() if line.strip()]


def test_a_command_runs_as_the_agent_in_its_sandbox_with_a_clean_environment(
    tools, home, monkeypatch
):
    monkeypatch.setenv("ARENA_SCAFFOLD_TOKEN", "arena_scaffold_secretsecret")
    result = tools.shell(
        'id -u; pwd; echo "$HOME|$PATH"; env | grep -c -e DATABASE_URL -e SCAFFOLD || true'
    )
    uid, where, env, leaked = result.output.splitlines()
    assert result.exit_code == 0
    assert int(uid) == pwd.getpwnam(USER).pw_uid and where == str(home)
    assert env.startswith(f"{home}|{home}/.arena/bin:")
    assert leaked == "0"  # neither the platform's database URL nor the scaffold's token


def test_the_os_refuses_to_show_a_link_to_a_file_the_agent_may_not_read(tools, home):
    (home / "shadow").unlink(missing_ok=True)
    (home / "root-key").unlink(missing_ok=True)
    tools.shell("ln -s /etc/shadow shadow; ln -s /root/.bashrc root-key")

    for link in ("shadow", "root-key"):
        shown = tools.view_file(link)
        assert shown.exit_code == 1 and "Permission denied" in shown.output
        assert "root:" not in shown.output
    edited = tools.edit_file({"action": "str_replace", "path": "shadow", "old": "root", "new": "x"})
    assert edited.exit_code == 1 and "Permission denied" in edited.output
    overwritten = tools.edit_file(
        {"action": "create", "path": "/etc/arena-harness-test", "text": "x", "overwrite": True}
    )
    assert overwritten.exit_code == 1 and not Path("/etc/arena-harness-test").exists()


def test_the_file_tools_view_a_range_and_edit_exactly_once(tools, home):
    created = tools.edit_file(
        {
            "action": "create",
            "path": "notes/plan.txt",
            "text": "alpha\nbeta\nbeta\n",
            "overwrite": True,
        }
    )
    assert created.exit_code == 0
    twice = tools.edit_file(
        {"action": "str_replace", "path": "notes/plan.txt", "old": "beta", "new": "gamma"}
    )
    assert twice.exit_code == 1 and "found 2 times" in twice.output
    tools.edit_file(
        {"action": "str_replace", "path": "notes/plan.txt", "old": "alpha", "new": "ALPHA"}
    )
    tools.edit_file({"action": "insert", "path": "notes/plan.txt", "line": 1, "text": "inserted"})

    assert (home / "notes" / "plan.txt").read_text() == "ALPHA\ninserted\nbeta\nbeta\n"
    assert (home / "notes" / "plan.txt").owner() == USER  # written by the agent, not root
    assert tools.view_file("notes/plan.txt", 2, 3).output == "     2\tinserted\n     3\tbeta"


def test_a_file_tool_that_would_block_forever_is_stopped_in_time(home):
    tools = ToolExecutor(
        unix_user=USER, home=home, python=str(settings.AGENTS_TRAIN_PYTHON), file_timeout_s=2
    )
    tools.shell("rm -f fifo; mkfifo fifo")  # opening it for reading waits for a writer
    started = time.monotonic()
    shown = tools.view_file("fifo")
    assert shown.exit_code == 1 and shown.output == "the file tool failed: no answer in time"
    assert time.monotonic() - started < 6
    assert agent_processes() == []


def test_an_output_bomb_is_cut_to_its_head_and_tail(tools):
    result = tools.shell("echo FIRST; head -c 50000000 /dev/zero | tr '\\0' y; echo; echo LAST")
    assert result.exit_code == 0
    assert result.output.startswith("FIRST\nyyy") and result.output.rstrip().endswith("LAST")
    assert "bytes of output cut]" in result.output
    assert len(result.output) < tools.output_chars + 200


def test_a_timeout_kills_every_process_the_command_started_even_after_setsid(tools):
    started = time.monotonic()
    result = tools.shell(
        "setsid sleep 1001 & setsid bash -c 'sleep 1002 & disown' ; nohup sleep 1003 & sleep 1000",
        timeout_s=2,
    )
    assert time.monotonic() - started < 10
    assert result.exit_code is None and "killed after 2 s" in result.output
    deadline = time.monotonic() + 5
    while agent_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agent_processes() == []


def test_a_command_that_closes_its_output_and_never_exits_still_times_out(tools):
    """The end of the output is not the end of the command: one that closes it and sleeps on
    must not hold the harness past its timeout."""
    started = time.monotonic()
    result = tools.shell("exec >/dev/null 2>&1; sleep 1000", timeout_s=2)
    assert time.monotonic() - started < 10
    assert result.exit_code is None and "killed after 2 s" in result.output
    deadline = time.monotonic() + 5
    while agent_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agent_processes() == []


def test_the_working_directory_persists_and_cannot_leave_the_sandbox_silently(tools, home):
    tools.shell("mkdir -p work/deeper && cd work/deeper")
    assert tools.shell("pwd").output.strip() == f"{home}/work/deeper"

    left = tools.shell("cd /etc")
    assert "outside your sandbox" in left.output
    assert tools.shell("pwd").output.strip() == f"{home}/work/deeper"

    (home / "escape").unlink(missing_ok=True)
    tools.shell(f"ln -s /etc {home}/escape")
    through_link = tools.shell(f"cd {home}/escape")  # the link's target is what counts
    assert "'/etc' is outside your sandbox" in through_link.output
    assert tools.cwd == f"{home}/work/deeper"


def test_the_supervisors_preexec_runs_in_the_tools_process(tools, home):
    def lower_the_file_limit() -> None:  # as the run's cgroup would, in the child only
        resource.setrlimit(resource.RLIMIT_NOFILE, (123, 123))

    limited = ToolExecutor(
        unix_user=USER, home=home, python=str(settings.AGENTS_TRAIN_PYTHON),
        preexec=lower_the_file_limit,
    )  # fmt: skip
    assert limited.shell("ulimit -n").output.strip() == "123"
    assert limited.view_file("/proc/self/limits").exit_code == 0
    assert "123" in limited.view_file("/proc/self/limits").output
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] != 123 or os.getpid() == 1


def test_a_timeout_leaves_no_zombie_of_a_wide_tree_whose_parents_die_with_it(tools):
    """Killing a tree is not one step: children reparented to the harness after their parents
    die (killed in the same pass) must be reaped too, not left as zombies."""
    result = tools.shell(
        "for i in $(seq 30); do setsid bash -c 'sleep 1000 & sleep 1000 & wait' & done; wait",
        timeout_s=2,
    )
    assert result.exit_code is None
    assert agent_processes() == []  # at once: the kill waited until nothing was left
