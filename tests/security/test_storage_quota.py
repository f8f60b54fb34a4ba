"""Issue 12, item 9: storage outside the quota, played by a real agent Unix user.

Before: the sandbox was a plain folder on the host's disk, measured every 60 s, so a write past
the quota always succeeded (the measurement only blocked new jobs afterwards), and a job's
/tmp and /dev/shm were the host's, unlimited and shared with everyone.

With `AGENTS_SANDBOX_STORAGE=loop_image` the sandbox is a filesystem of the quota's size, and
a Slurm job's /tmp and /var/tmp are private and live on that same filesystem, and its /dev/shm
is private and held to the job's memory (infra/slurm/arena_jobtmp.c).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from cluster import private_tmp
from cluster.backends.base import AccountLimits, JobRequest
from cluster.backends.local import LocalBackend
from cluster.private_tmp import VOLUMES
from cluster.services import account_ensure, job_submit
from cluster.slurm import cli
from tests.agents import test_runs as agent_runs
from tests.cluster.conftest import wait_for_state
from tests.security.conftest import Player
from tests.support.workers import agent_user

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Not under /tmp: an agent's job gets a /tmp of its own, which hides the host's.
ROOT = Path("/srv/rsi-arena/sandboxes-quota-test")
QUOTA_GIB = 1
NO_SPACE = "No space left on device"
# The supervisor's settings here and in its keepers, with the stand-in harness (a fixture).
runs_env = agent_runs.runs_env


@pytest.fixture
def quota_players(settings, slurm) -> Iterator[Callable[[str], Player]]:
    """Agents provisioned the production way, with a 1 GiB storage quota."""
    settings.AGENTS_SANDBOX_STORAGE = "loop_image"
    settings.AGENTS_DEFAULT_STORAGE_GIB = QUOTA_GIB
    sandboxes = UnixSandboxes(ROOT)
    made: list[str] = []

    def provision(name: str) -> Player:
        done = agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        made.append(name)
        return Player(done)

    yield provision
    for name in made:
        agent_deprovision(name=name, sandboxes=sandboxes, backend=slurm)
        sandboxes.remove(agent_user(name))


def run_job(player: Player, script: str, *options: str, timeout_s: float = 120) -> str:
    """sbatch as the agent, from its sandbox; the job's output once it has ended."""
    home, account = player.home, player.provisioned.agent.cluster_account
    submitted = player.shell(
        f"sbatch --parsable --account={account} -t 5 --output={home}/job-%j.out {' '.join(options)} "
        f"--wrap '{script}'"
    )
    job = submitted.stdout.strip()
    assert job.isdigit(), submitted.stderr
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = cli.sacct_rows(["State"], "-X", "-j", job)
        if rows and rows[0]["State"].split()[0] not in {"PENDING", "RUNNING", "REQUEUED", ""}:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"job {job} did not end")
    return player.shell(f"cat {home}/job-{job}.out").stdout


def used_bytes(player: Player) -> int:
    df = player.shell(f"df -B1 --output=size,used {player.home} | tail -1").stdout.split()
    return int(df[1])


def test_writing_past_the_quota_in_the_sandbox_fails_at_write_time(quota_players):
    mallory = quota_players("sec_fill")
    done = mallory.shell(
        "fallocate -l 900M fill && dd if=/dev/zero of=more bs=1M count=300 conv=fsync; echo dd=$?"
    )
    assert NO_SPACE in done.stderr, done.stderr
    assert "dd=1" in done.stdout
    assert used_bytes(mallory) <= QUOTA_GIB * 1024**3
    # Deleting brings the space back: the quota is on what is there now.
    freed = mallory.shell("rm fill more && dd if=/dev/zero of=again bs=1M count=100 && echo ok")
    assert freed.stdout.strip() == "ok", freed.stderr


def test_a_jobs_tmp_is_private_and_counts_against_the_quota(quota_players):
    mallory = quota_players("sec_tmp")
    host_file = Path("/tmp") / f"arena-host-tmp-{mallory.uid}"
    host_file.write_text("on the host's /tmp\n")
    host_file.chmod(0o644)
    try:
        output = run_job(
            mallory,
            f"ls /tmp/{host_file.name} 2>&1; fallocate -l 900M $HOME/fill; "
            "dd if=/dev/zero of=/tmp/spill bs=1M count=300 2>&1; echo dd=$?; "
            "dd if=/dev/zero of=/var/tmp/spill bs=1M count=300 2>&1; echo var_dd=$?",
            "--gres=gpu:0",
        )
    finally:
        host_file.unlink()
    assert "No such file or directory" in output, "the job saw the host's /tmp"
    assert NO_SPACE in output and "\ndd=1" in output and "var_dd=1" in output, output
    assert not Path("/var/tmp/spill").exists()
    # Once the job is over its /tmp is gone, and the space with it.
    time.sleep(2)
    assert used_bytes(mallory) < 1000 * 1024**2


def test_a_jobs_dev_shm_is_private_and_held_to_its_memory(quota_players):
    mallory = quota_players("sec_shm")
    output = run_job(
        mallory,
        "echo started; dd if=/dev/zero of=/dev/shm/arena-spill bs=1M count=600 2>&1; echo dd=$?",
        "--gres=gpu:0",
        "--mem=200",
    )
    assert output.startswith("started"), output
    assert not Path("/dev/shm/arena-spill").exists(), "the job wrote the host's /dev/shm"
    assert NO_SPACE in output and re.search(r"^dd=1$", output, re.M), output


def test_a_deprovisioned_sandbox_is_kept_read_only_and_comes_back_larger(
    quota_players, settings, slurm
):
    mallory = quota_players("sec_grow")
    mallory.attack("echo notes > notes.txt")
    sandboxes = UnixSandboxes(ROOT)
    agent_deprovision(name="sec_grow", sandboxes=sandboxes, backend=slurm)
    # Kept for the audit, and nothing writes to it any more, root included.
    assert (mallory.home / "notes.txt").read_text() == "notes\n"
    with pytest.raises(OSError, match="Read-only file system"):
        (mallory.home / "later.txt").write_text("x")
    settings.AGENTS_DEFAULT_STORAGE_GIB = 2
    again = Player(agent_provision(name="sec_grow", sandboxes=sandboxes, backend=slurm))
    assert again.shell("cat notes.txt").stdout == "notes\n"
    size = int(again.shell(f"df -B1 --output=size {again.home} | tail -1").stdout)
    assert size > 1.5 * 1024**3
    grown = again.shell("fallocate -l 1500M big && echo ok")
    assert grown.stdout.strip() == "ok", grown.stderr


def test_a_local_jobs_tmp_and_dev_shm_are_private_and_bounded(quota_players, tmp_path):
    """The local backend (the demo's cluster) gives an agent's job the same private /tmp,
    /var/tmp (on its quota volume) and /dev/shm (bounded) as Slurm does."""
    mallory = quota_players("sec_ltmp")
    backend = LocalBackend(log_dir=tmp_path / "scheduler")
    account = account_ensure(
        name="agent_sec_ltmp_local", unix_user=mallory.user, period="p", storage_gib=1,
        limits=AccountLimits(gpu_hours=10.0, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24),
        backend=backend,
    )  # fmt: skip
    host_file = Path("/tmp") / f"arena-host-tmp-{mallory.uid}"
    host_file.write_text("on the host's /tmp\n")
    host_file.chmod(0o644)
    script = (
        f"ls /tmp/{host_file.name} 2>&1; fallocate -l 900M $HOME/fill; "
        "dd if=/dev/zero of=/tmp/spill bs=1M count=300 2>&1; echo dd=$?; "
        "dd if=/dev/zero of=/var/tmp/spill bs=1M count=300 2>&1; echo var_dd=$?; "
        "dd if=/dev/zero of=/dev/shm/arena-spill bs=1M count=600 2>&1; echo shm_dd=$?"
    )
    request = JobRequest(
        name="spill", script=script, nodes=1, gpus_per_node=0, time_limit_minutes=2,
        preemptible=False, workdir=mallory.home,
    )  # fmt: skip
    try:
        job = job_submit(account=account, request=request, backend=backend)
        wait_for_state(job, {"COMPLETED", "FAILED"}, backend=backend)
    finally:
        host_file.unlink()
    output = mallory.shell(f"cat slurm-{job.scheduler_id}.out").stdout
    assert "No such file or directory" in output, "the job saw the host's /tmp"
    assert NO_SPACE in output and "\ndd=1" in output and "var_dd=1" in output, output
    assert "shm_dd=1" in output, output
    assert not Path("/var/tmp/spill").exists() and not Path("/dev/shm/arena-spill").exists()
    # Its /tmp is gone with the job, and the space with it.
    assert not (VOLUMES / mallory.user / "jobs" / f"local-{job.scheduler_id}").exists()
    mallory.shell("rm -f fill")
    assert used_bytes(mallory) < 100 * 1024**2


def test_an_agent_run_the_platform_starts_writes_tmp_inside_its_quota(quota_players):
    """What the platform runs as the agent outside any job (the demo's agents) gets the same
    private /tmp: filling it fills the agent's own volume, and stops there."""
    mallory = quota_players("sec_rtmp")
    private = private_tmp.prepare(mallory.user, "run-test")
    assert private is not None
    done = subprocess.run(
        [*private.prefix, "runuser", "-u", mallory.user, "--", "sh", "-c",
         "dd if=/dev/zero of=/tmp/spill bs=1M count=1200 2>&1; echo dd=$?; "
         "df -B1 --output=target /tmp | tail -1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert NO_SPACE in done.stdout and "dd=1" in done.stdout, done.stdout + done.stderr
    assert not Path("/tmp/spill").exists()
    assert used_bytes(mallory) > 900 * 1024**2  # it was the agent's own space it filled
    private_tmp.release(private)
    assert not private.folder.exists()
    assert used_bytes(mallory) < 100 * 1024**2


def test_a_harness_tool_calls_tmp_is_the_runs_own_and_counts_against_the_quota(
    quota_players, runs_env, monkeypatch
):
    """Issue 25, finding 7: under the arena harness a tool call's /tmp was the host's, outside
    the quota and shared with every user. Now each call of a run gets the run's private /tmp
    (the same folders from call to call), as a `command` run does."""
    mallory = quota_players("sec_htmp")
    host_file = Path("/tmp") / f"arena-host-tmp-{mallory.uid}"
    spill = f"arena-tool-spill-{mallory.uid}"
    calls = [
        f"ls /tmp/{host_file.name} 2>&1; dd if=/dev/zero of=/tmp/{spill} bs=1M count=1200 2>&1;"
        " echo dd=$?",
        f"ls /tmp/{spill} && df -B1 --output=used $HOME | tail -1",
    ]
    monkeypatch.setenv("ARENA_STANDIN_TOOLS", json.dumps(calls))
    host_file.write_text("on the host's /tmp\n")
    host_file.chmod(0o644)
    try:
        _, report = agent_runs.standin_run(mallory.provisioned.agent, runs_env, timeout=120)
    finally:
        host_file.unlink()
        wrote_the_hosts = Path("/tmp", spill).exists()
        Path("/tmp", spill).unlink(missing_ok=True)
    filled, seen = report["tool_outputs"]
    assert "No such file or directory" in filled, "the tool call saw the host's /tmp"
    assert NO_SPACE in filled and "dd=1" in filled, filled
    assert not wrote_the_hosts, "the tool call wrote the host's /tmp"
    # The next call finds the file, on the agent's own volume; the run's end gives it back.
    assert seen.startswith(f"/tmp/{spill}") and int(seen.split()[-1]) > 900 * 1024**2, seen
    assert used_bytes(mallory) < 100 * 1024**2
