"""Agent runs on the real machine: real agent Unix users, detached keepers, cgroups, the
`command` harness with small shell and Python programs, and the supervisor in-process and as
a separate process that is killed."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.models import AgentToken
from agents.runs.limits import CGROUP_MOUNT, RunLimits, available_kind
from agents.runs.models import AgentRun
from agents.runs.processes import alive, start_time
from agents.runs.services import RunRefused, run_start, run_stop, runs_supervise
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision, token_digest
from arena.competition.models import CompetitionAgent, Phase
from tests import factories
from tests.conftest import ROOT, _database_url_for_subprocess
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SANDBOXES = worker_path("/tmp/arena-sandboxes-runs")
UPSTREAM_SECRET = "sk-upstream-never-in-a-sandbox"


@pytest.fixture
def runs_env(tmp_path, settings, monkeypatch):
    """The same settings here and in the keepers this test starts (they read the environment)."""
    values = {
        "AGENTS_RUNS_DIR": str(tmp_path / "runs"),
        "AGENTS_RUNS_CGROUP_ROOT": f"rsi-arena-test-{os.getpid()}",
        "AGENTS_RUNS_POLL_S": "0.3",
        "AGENTS_RUNS_BACKOFF_S": "0.2",
        "AGENTS_RUNS_STOP_GRACE_S": "1",
        "AGENTS_RUNS_REGISTER_GRACE_S": "20",
        "AGENTS_HARNESS_MODULE": "tests.agents.harness_standin",
        "AGENTS_RUNS_LOG_MAX_BYTES": "65536",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
        setattr(settings, key, type(getattr(settings, key))(value))
    monkeypatch.setenv("DATABASE_URL", _database_url_for_subprocess())
    # The platform's own upstream key is in the supervisor's environment: no run may see it.
    monkeypatch.setenv("OPENAI_API_KEY", UPSTREAM_SECRET)
    yield tmp_path / "runs"
    for controller in ("memory", "pids", "cpu", "cpuacct", "freezer"):
        with contextlib.suppress(OSError):  # each run removed its own group; this is the root
            (CGROUP_MOUNT / controller / values["AGENTS_RUNS_CGROUP_ROOT"]).rmdir()


@pytest.fixture
def provision(slurm, runs_env):
    sandboxes = UnixSandboxes(SANDBOXES)
    made = []

    def make(name):
        done = agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        made.append(done.agent)
        return done.agent

    yield make
    for agent in made:
        for run in AgentRun.objects.filter(agent=agent, state__in=AgentRun.UNFINISHED):
            run_stop(agent=agent, reason="test over")
            _wait_for(
                lambda run=run: _state(run) not in AgentRun.UNFINISHED,
                timeout=ATTEMPT_S,
                supervise=True,
            )
        agent_deprovision(name=agent.name, sandboxes=sandboxes, backend=slurm)


def _state(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.state


# How long one attempt may take to start, run a short command and be recorded: a keeper and its
# two steps that each load Django (about 3 s apiece on a quiet machine; several times that beside
# the rest of the suite on two cores, where a 60-second wait for three attempts ran out).
ATTEMPT_S = 80.0
# How long one `manage.py agents …` command may take: it loads Django and, for `supervise
# --once`, looks at every run; beside the suite on two cores one ran past 60 s in CI.
COMMAND_S = 180.0


def _wait_for(condition, *, timeout=30.0, supervise=False):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if supervise:
            runs_supervise()
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def _log(runs_dir: Path, run: AgentRun, attempt: int = 1) -> str:
    path = runs_dir / str(run.pk) / f"attempt-{attempt}.log"
    return path.read_text() if path.exists() else ""


def _processes_of(user: str) -> list[int]:
    uid = pwd.getpwnam(user).pw_uid
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and start_time(int(entry)) is not None:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_command_run_runs_as_the_agent_in_its_sandbox_with_the_scaffold_token(
    provision, runs_env
):
    agent = provision("run_ann")
    script = 'id -un; pwd; env | sort; cat /proc/self/cgroup; echo "$OPENAI_API_KEY" > token'
    run = run_start(agent=agent, harness="command", command=["sh", "-c", script], model="m1")
    _wait_for(lambda: _state(run) == "finished")

    log = _log(runs_dir=runs_env, run=run)
    lines = log.splitlines()
    assert lines[0] == agent.unix_user and lines[1] == agent.sandbox
    env = dict(
        line.split("=", 1) for line in lines if "=" in line and ":" not in line.split("=")[0]
    )
    assert env["HOME"] == agent.sandbox and env["PATH"].startswith(f"{agent.sandbox}/.arena/bin:")
    assert env["OPENAI_BASE_URL"].endswith("/proxy/v1") and env["ARENA_MODEL"] == "m1"
    assert env["ANTHROPIC_BASE_URL"] == env["OPENAI_BASE_URL"].removesuffix("/v1")
    assert env["ANTHROPIC_API_KEY"] == env["OPENAI_API_KEY"]
    assert UPSTREAM_SECRET not in log and "DATABASE_URL" not in env
    # The key it holds is a scaffold token of its own agent, revoked once the attempt ended.
    token = AgentToken.objects.get(digest=token_digest(env["OPENAI_API_KEY"]))
    assert (token.agent, token.kind) == (agent, AgentToken.Kind.SCAFFOLD)
    assert token.revoked_at is not None
    # Inside the run's own group (this machine has cgroup v1), removed after the run.
    if run.limits_kind == "cgroup1":
        assert f"rsi-arena-test-{os.getpid()}/run-{run.pk}" in log
        assert not Path(f"/sys/fs/cgroup/pids/rsi-arena-test-{os.getpid()}/run-{run.pk}").exists()
    status = json.loads((runs_env / str(run.pk) / "status.json").read_text())
    assert status["state"] == "finished" and status["exit_code"] == 0
    assert oct((runs_env / str(run.pk)).stat().st_mode & 0o777) == "0o700"
    run.refresh_from_db()
    assert (run.attempts, run.exit_code, run.keeper_pid) == (1, 0, None)


def test_a_second_run_of_the_same_agent_is_refused_while_one_runs(provision):
    agent = provision("run_ben")
    run_start(agent=agent, harness="command", command=["sleep", "600"])
    with pytest.raises(RunRefused, match="already has a run"):
        run_start(agent=agent, harness="command", command=["true"])
    with pytest.raises(RunRefused, match="needs the command"):
        run_start(agent=provision("run_ben2"), harness="command", command=[])


def test_a_crash_is_restarted_up_to_the_limit_then_the_run_fails(provision):
    agent = provision("run_cat")
    tally = f"crashes-{uuid.uuid4().hex}"  # sandboxes outlive test sessions, run ids do not
    run = run_start(
        agent=agent,
        harness="command",
        command=["sh", "-c", f"echo attempt >> {tally}; exit 3"],
        max_restarts=2,
    )
    _wait_for(lambda: _state(run) == "failed", supervise=True, timeout=3 * ATTEMPT_S)

    assert run.attempts == 3 and run.exit_code == 3
    assert "failed after 3 attempts" in run.detail and "exited with code 3" in run.detail
    crashes = subprocess.run(
        ["runuser", "-u", agent.unix_user, "--", "cat", f"{agent.sandbox}/{tally}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert crashes.splitlines() == ["attempt"] * 3


def test_stop_ends_the_run_and_every_process_it_forked_setsid_included(provision, runs_env):
    agent = provision("run_dan")
    script = "setsid sleep 1000 & (sleep 1001 &) ; nohup sleep 1002 >/dev/null 2>&1 & echo up; wait"
    run = run_start(agent=agent, harness="command", command=["sh", "-c", script])
    _wait_for(lambda: "up" in _log(runs_env, run) and len(_processes_of(agent.unix_user)) >= 4)

    call_command("agents", "stop", agent.name)

    run.refresh_from_db()
    assert run.state == "stopped" and "stopped by an organizer" in run.detail
    assert _processes_of(agent.unix_user) == []


@pytest.mark.skipif(available_kind() == "rlimits", reason="needs cgroups to hold a whole run")
def test_a_memory_hog_and_a_fork_bomb_are_held_by_the_limits(provision, runs_env):
    hog_agent, bomb_agent = provision("run_hog"), provision("run_bomb")
    hog = run_start(
        agent=hog_agent,
        harness="command",
        # 2 GiB in 16 MiB steps, touched: killed well before, at 64 MiB.
        command=["python3", "-c", "b=[]\nfor i in range(128): b.append(bytearray(16<<20))\nprint('survived')"],
        memory_mib=64,
        max_restarts=0,
    )  # fmt: skip
    bomb = run_start(
        agent=bomb_agent,
        harness="command",
        command=["python3", "-c", "import os\nwhile True:\n try: os.fork()\n except OSError: pass"],
        max_processes=24,
        cpus=0.2,
    )  # fmt: skip
    _wait_for(lambda: _state(hog) == "failed", supervise=True, timeout=ATTEMPT_S)
    assert "SIGKILL" in hog.detail and "memory limit of 64 MiB" in hog.detail
    assert "survived" not in _log(runs_env, hog)

    limits = RunLimits.for_run(bomb.pk)
    _wait_for(lambda: (limits.usage().processes or 0) >= 20)
    assert limits.usage().processes <= 24
    # The host is fine: this process still starts others.
    assert subprocess.run(["true"]).returncode == 0
    run_stop(agent=bomb_agent)
    _wait_for(lambda: _state(bomb) == "stopped", timeout=30)
    assert _processes_of(bomb_agent.unix_user) == []


def test_the_deadline_stops_a_run(provision):
    agent = provision("run_eve")
    run = run_start(agent=agent, harness="command", command=["sleep", "600"], hours=2 / 3600)
    _wait_for(lambda: _state(run) == "stopped", timeout=ATTEMPT_S)  # its keeper starts first
    assert "deadline" in run.detail
    assert _processes_of(agent.unix_user) == []


def test_a_running_phase_starts_its_agents_runs_and_its_freeze_stops_them(provision, capsys):
    agent = provision("run_fay")
    provision("run_gus")  # fielded with no harness: run by hand, never started
    phase = factories.running_phase()
    CompetitionAgent.objects.create(competition=phase.competition, name="run_fay",
                                    harness="command", command=["sleep", "600"])  # fmt: skip
    CompetitionAgent.objects.create(competition=phase.competition, name="run_gus", harness="none")

    call_command("phases", "tick")  # the phases worker supervises runs each tick
    run = AgentRun.objects.get(agent=agent)
    assert f"runs: run {run.pk} (run_fay): started" in capsys.readouterr().out
    assert run.phase == phase and run.deadline == phase.ends_at
    agent.refresh_from_db()
    assert (
        agent.scaffold_credit_limit
        == CompetitionAgent._meta.get_field("scaffold_budget_usd").default
    )  # the competition's budget, where none was set
    _wait_for(lambda: _processes_of(agent.unix_user) != [])

    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.FROZEN)
    runs_supervise()
    _wait_for(lambda: _state(run) == "stopped", supervise=True)
    assert "phase phase-1 is frozen" in run.detail
    assert _processes_of(agent.unix_user) == []
    # Once per phase: a stopped run is not started again.
    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.RUNNING)
    assert runs_supervise() == [] and AgentRun.objects.filter(agent=agent).count() == 1


def _manage(*args: str, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_a_killed_supervisor_is_replaced_and_the_new_one_adopts_the_running_keeper(provision):
    agent = provision("run_hal")
    started = _manage("agents", "run", agent.name, "--harness", "command", "--command",
                      "sh", "-c", "echo $$ > pid; exec sleep 600")  # fmt: skip
    assert "run " in started.communicate(timeout=COMMAND_S)[0]
    run = AgentRun.objects.get(agent=agent)
    _wait_for(lambda: (run.refresh_from_db(), run.keeper_pid)[1] is not None)
    keeper = (run.keeper_pid, run.keeper_started)

    supervisor = _manage("agents", "supervise", "--every", "0.3")
    time.sleep(3)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait()
    assert alive(*keeper)

    again = _manage("agents", "supervise", "--once")
    output = again.communicate(timeout=COMMAND_S)[0]
    assert f"run {run.pk} (run_hal): adopted" in output, output
    run.refresh_from_db()
    assert (run.state, run.attempts, run.keeper_pid) == ("running", 1, keeper[0])

    # The keeper dies while no supervisor runs: the next one ends what it left and restarts.
    os.kill(keeper[0], signal.SIGKILL)
    _wait_for(lambda: not alive(*keeper))
    again = _manage("agents", "supervise", "--once")
    assert "crashed" in again.communicate(timeout=COMMAND_S)[0]
    assert _processes_of(agent.unix_user) == []
    _wait_for(lambda: (run.refresh_from_db(), run.attempts)[1] == 2, supervise=True)
    _wait_for(lambda: _processes_of(agent.unix_user) != [])
    assert "its keeper died" in AgentRun.objects.get(pk=run.pk).detail


def test_a_deprovisioned_agents_run_is_stopped(provision, slurm):
    agent = provision("run_max")
    run = run_start(agent=agent, harness="command", command=["sleep", "600"])
    _wait_for(lambda: _processes_of(agent.unix_user) != [])
    agent_deprovision(name=agent.name, sandboxes=UnixSandboxes(SANDBOXES), backend=slurm)
    _wait_for(lambda: _state(run) == "stopped", supervise=True)
    assert run.attempts == 1 and "deprovisioned" in run.detail


def test_one_agents_failing_run_never_touches_anothers(provision):
    failing, steady = provision("run_ivy"), provision("run_jon")
    broken = run_start(agent=failing, harness="command", command=["/no/such/program"],
                       max_restarts=1)  # fmt: skip
    good = run_start(agent=steady, harness="command", command=["sleep", "600"])
    _wait_for(lambda: _state(broken) == "failed", supervise=True, timeout=2 * ATTEMPT_S)

    good.refresh_from_db()
    assert (good.state, good.attempts) == ("running", 1)
    assert alive(good.keeper_pid, good.keeper_started)
    assert _processes_of(steady.unix_user) != []


def standin_run(agent, runs_dir: Path, *, timeout: float = 60.0) -> tuple[AgentRun, dict]:
    """An arena run of `agent`, played by the stand-in harness to its end: the run, and what
    the stand-in reported."""
    run = run_start(agent=agent, harness="arena", model="scripted")
    _wait_for(lambda: _state(run) not in AgentRun.UNFINISHED, supervise=True, timeout=timeout)
    log = _log(runs_dir, run)
    assert run.state == "finished", log
    report = json.loads(next(line for line in log.splitlines() if line.startswith("REPORT "))[7:])
    return run, report


def test_the_arena_harness_runs_as_the_platform_outside_the_group_its_tools_inside(
    provision, runs_env, monkeypatch
):
    """With the platform's settings and nothing else of the supervisor's environment (issue
    25, finding 1: it had all of it, and the harness is the process whose tools the agent
    drives)."""
    monkeypatch.setenv("HF_TOKEN", "hf_platform_canary")
    monkeypatch.setenv("ARENA_CATEGORY_JUDGE_API_KEY", "sk-judge-canary")
    agent = provision("run_kim")
    run, report = standin_run(agent, runs_env)
    assert report["uid"] == 0 and report["proxy_url"].endswith("/proxy/v1")
    token = AgentToken.objects.get(digest=token_digest(report["token"]))
    assert (token.agent, token.kind) == (agent, AgentToken.Kind.SCAFFOLD)
    environment = set(report["environment"])
    assert {"DATABASE_URL", "AGENTS_RUNS_DIR", "ARENA_SCAFFOLD_TOKEN"} <= environment
    assert not environment & {"OPENAI_API_KEY", "HF_TOKEN", "ARENA_CATEGORY_JUDGE_API_KEY"}
    group = f"run-{run.pk}"
    assert group not in report["harness_cgroup"]
    assert report["tool_output"].splitlines()[0] == agent.unix_user
    if run.limits_kind == "cgroup1":
        assert group in report["tool_output"]


def test_runs_lists_the_runs_and_a_runs_output_is_cut_at_its_bound(provision, capsys, runs_env):
    agent = provision("run_lea")
    run = run_start(agent=agent, harness="command", command=["sh", "-c", "yes x | head -c 1000000"])
    _wait_for(lambda: _state(run) == "finished")
    call_command("agents", "runs", "--json")
    rows = json.loads(capsys.readouterr().out)
    assert [(row["agent"], row["state"], row["attempts"]) for row in rows] == [
        ("run_lea", "finished", 1)
    ]
    assert rows[0]["limits"]["kind"] == available_kind()
    assert timezone.now() + timedelta(hours=23) < run.deadline  # the default without a phase
    log = (runs_env / str(run.pk) / "attempt-1.log").read_bytes()
    assert log.startswith(b"x\nx\n") and len(log) < 65536 + 200
    assert log.endswith(b"output cut at 65536 bytes; 934464 more dropped]\n")


def test_a_new_run_never_takes_the_folder_of_an_earlier_databases_run(provision, runs_env):
    """Run ids start again with a new database (each `make demo` has a fresh one), and the
    runs folder outlives it: a harness once resumed another run's ended conversation and did
    nothing. A new run's folder is its own; what was there is kept aside."""
    from django.db import connection

    agent = provision("run_ned")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('agent_runs_agentrun', 'id')")
        (sequence,) = cursor.fetchone()
        cursor.execute(f"SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM {sequence}")
        (next_id,) = cursor.fetchone()
    planted = runs_env / str(next_id)
    planted.mkdir(parents=True)
    (planted / "conversation.json").write_text('{"ended": "the model said it was done"}')
    (planted / "status.json").write_text('{"attempt": 1, "state": "finished", "exit_code": 0}')

    run = run_start(agent=agent, harness="command", command=["sh", "-c", "echo fresh"])
    assert run.pk == next_id
    _wait_for(lambda: _state(run) == "finished")
    folder = runs_env / str(run.pk)
    assert not (folder / "conversation.json").exists()
    assert _log(runs_env, run).strip() == "fresh"
    (earlier,) = runs_env.glob(f"{run.pk}.earlier-*")
    assert json.loads((earlier / "conversation.json").read_text())["ended"]
