"""Issue 12, item 7: an agent names its jobs (and picks their working directories) freely, and
Slurm prints those names unescaped. Whatever it writes there, the platform's accounting books
its jobs to its own account with what they really used, and never touches a rival's ledger.

Each attack is played by the agent's own Unix user with plain `sbatch` on the real cluster."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from cluster.backends.slurm import SlurmBackend
from cluster.models import Job, JobSegment
from cluster.selectors import gpu_seconds_charged
from cluster.services import cluster_sync
from cluster.slurm import cli
from tests.cluster.conftest import make_agent, settled_usage_seconds  # noqa: F401 - fixture

pytestmark = pytest.mark.slow


def _forged_sacct_fields(rival: str) -> str:
    """What follows a job id in `sacct -P -o JobIDRaw,JobName,Account,...,ExitCode` for a
    rival's completed 24-hour job on 8 GPUs, submitted now."""
    now = timezone.localtime().replace(microsecond=0, tzinfo=None)
    later = now + timedelta(minutes=1)
    tres = "billing=8,cpu=1,gres/gpu=8,mem=200M,node=1"
    return "|".join(
        [
            rival, "normal", "COMPLETED", "None", "1", tres, tres, "1440", "/tmp",
            now.isoformat(), now.isoformat(), later.isoformat(), "86400", "0:0",
        ]
    )  # fmt: skip


def _sbatch_as(agent, *args: str, name: str, workdir: Path, script: str) -> str:
    """The agent's own `sbatch`, as its Unix user, exactly as it would type it."""
    result = cli.run(
        ["sbatch", "--parsable", f"--account={agent.account.name}", f"--job-name={name}",
         f"--chdir={workdir}", "--output=/dev/null", *args, "--wrap", script],
        user=agent.user, cwd=str(agent.sandbox),
    )  # fmt: skip
    return result.stdout.strip().split(";")[0]


def _wait_until_accounted(
    slurm: SlurmBackend, account: str, scheduler_ids: list[str], timeout_s: float = 90
) -> None:
    """Until the platform's own accounting query has every job's end (the sync books only
    whole records). That query filters by start time, and slurmdbd answers it a moment later
    than a query by job id: waiting on the other would race the sync."""
    since = timezone.now() - timedelta(minutes=10)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = slurm.accounting(accounts=[account], since=since)
        if {r.scheduler_id for r in rows if r.ended_at is not None} >= set(scheduler_ids):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs {scheduler_ids} did not finish in accounting")


def _make_dir_as(agent, path: Path) -> None:
    cli.run(["mkdir", "-p", "--", str(path)], user=agent.user)


def test_job_names_and_workdirs_that_forge_a_rivals_rows_are_booked_to_the_attacker(
    make_agent,  # noqa: F811 - the fixture imported above
    slurm: SlurmBackend,
) -> None:
    attacker = make_agent("forger")
    rival = make_agent("rival")
    rival_name = rival.account.name

    # 1. A `|` in the name: the rest of the line reads as a rival's 8-GPU day.
    pipe_name = "x|" + _forged_sacct_fields(rival_name)
    # 2. A newline in the name: a whole forged line of its own, with its own job id.
    newline_name = "y\n987654321|forged|" + _forged_sacct_fields(rival_name)
    # 3. The separator and a newline in the working directory (the agent's own folder).
    odd_dir = attacker.sandbox / ("run|COMPLETED|8\n424242|z|" + rival_name + "|normal")
    _make_dir_as(attacker, odd_dir)
    ids = [
        _sbatch_as(attacker, "--gres=gpu:1", "-t", "2", name=pipe_name,
                   workdir=attacker.sandbox, script="sleep 2"),
        _sbatch_as(attacker, "--gres=gpu:2", "-t", "2", name=newline_name,
                   workdir=attacker.sandbox, script="sleep 2"),
        _sbatch_as(attacker, "--gres=gpu:1", "-t", "2", name="plain-name",
                   workdir=odd_dir, script="sleep 2"),
    ]  # fmt: skip
    _wait_until_accounted(slurm, attacker.account.name, ids)

    report = cluster_sync(backend=slurm, account_names=[attacker.account.name, rival_name])

    # The rival has no jobs and was charged nothing.
    assert not Job.objects.filter(account=rival.account).exists()
    assert gpu_seconds_charged(rival.account) == 0
    # The attacker's three jobs, and only them, under their real names, GPUs and folders.
    jobs = {j.scheduler_id: j for j in Job.objects.filter(account=attacker.account)}
    assert set(jobs) == set(ids), report
    assert [jobs[i].name for i in ids] == [pipe_name[:100], newline_name[:100], "plain-name"]
    assert [jobs[i].gpus for i in ids] == [1, 2, 1]
    assert jobs[ids[2]].workdir == str(odd_dir)
    assert all(jobs[i].state == "COMPLETED" for i in ids)
    # Each booked for what it really used, as Slurm itself charged the attacker.
    segments = JobSegment.objects.filter(job__account=attacker.account)
    assert sorted(s.job.scheduler_id for s in segments) == sorted(ids)
    charged = gpu_seconds_charged(attacker.account)
    assert charged == sum(s.gpus * s.elapsed_seconds for s in segments)
    assert all(1 <= s.elapsed_seconds <= 60 for s in segments)
    assert abs(settled_usage_seconds(attacker.account.name, slurm) - charged) < 60


def test_a_job_name_with_a_newline_does_not_forge_a_row_in_the_cluster_queue(
    make_agent,  # noqa: F811 - the fixture imported above
    slurm: SlurmBackend,
) -> None:
    attacker = make_agent("queuer")
    rival = make_agent("queued")
    # A forged `squeue -O` line for the rival: 8 GPUs running on n1.
    forged = "|".join(
        ["31337", rival.account.name, rival.user, "RUNNING", "normal", "n1",
         "cpu=1,mem=200M,node=1,billing=8,gres/gpu=8", "None", "1:00", "2:00", "rival-job"]
    )  # fmt: skip
    name = "q|x\n" + forged
    held = _sbatch_as(
        attacker, "--gres=gpu:1", "-t", "2", "--hold", name=name,
        workdir=attacker.sandbox, script="true",
    )  # fmt: skip

    queue = [
        job for job in slurm.queue() if job.account in {attacker.account.name, rival.account.name}
    ]

    assert [(j.scheduler_id, j.account, j.name, j.gpus, j.state) for j in queue] == [
        (held, attacker.account.name, name, 1, "PENDING")
    ]
