"""Issue 12, item 8: free resources, played by a real agent Unix user with plain `sbatch`.

Before: billing and budgets counted GPUs only, so `sbatch -c 8 --gres=gpu:0` held a whole
node (and its 8 GPUs, which nobody else could then use) for 24 h at no cost; with
`proctrack/linuxproc` a `setsid nohup` child escaped the job and ran on after it ended; and a
job could use more memory than it was given (and billed for).
"""

from __future__ import annotations

import subprocess
import time

import pytest

from cluster.backends.base import AccountLimits
from cluster.models import ClusterAccount
from cluster.reasons import submit_error
from cluster.selectors import account_usage
from cluster.services import account_ensure, cluster_sync
from cluster.slurm import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BUDGET = AccountLimits(gpu_hours=2, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)


def with_budget(player, slurm, limits: AccountLimits = BUDGET) -> ClusterAccount:
    """The agent's account with a small GPU-hour budget, as a phase would set it."""
    account = ClusterAccount.objects.get(name=player.provisioned.agent.cluster_account)
    slurm.usage_reset(account=account.name)  # an earlier run's usage of the same account
    return account_ensure(
        name=account.name, unix_user=player.user, period=account.period, limits=limits,
        storage_gib=account.storage_gib_limit, backend=slurm,
    )  # fmt: skip


def sbatch(player, *args: str, script: str = "true") -> subprocess.CompletedProcess[str]:
    account = player.provisioned.agent.cluster_account
    return player.shell(f"sbatch --parsable --account={account} {' '.join(args)} --wrap '{script}'")


def wait_state(job_id: str, states: set[str], timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        rows = cli.sacct_rows(["State"], "-X", "-j", job_id)
        state = rows[0]["State"].split()[0] if rows else ""
        if state in states:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} stayed {state!r}")


@pytest.mark.parametrize(
    "hoard",
    [("-c", "8", "--gres=gpu:0"), ("--mem=64000", "--gres=gpu:0")],
    ids=["a-node-of-cpus", "a-node-of-memory"],
)
def test_a_day_of_a_whole_node_without_gpus_costs_what_its_gpus_would(players, slurm, hoard):
    mallory = players("sec_free")
    with_budget(mallory, slurm)  # 2 GPU-hours: far less than 8 GPU-equivalents for 24 h
    held = sbatch(mallory, *hoard, "-t", "24:00:00", script="sleep 86400")
    assert held.stdout.strip() == "", "a node was held for a day at no cost to the budget"
    assert "GPU-hour budget" in submit_error(held.stderr), held.stderr


def test_cpu_time_is_charged_in_gpu_equivalents_by_slurm_and_in_the_ledger(players, slurm):
    mallory = players("sec_free2")
    account = with_budget(mallory, slurm)
    job = sbatch(mallory, "-c", "4", "--gres=gpu:0", "-t", "2", script="sleep 20").stdout.strip()
    assert job.isdigit()
    wait_state(job, {"COMPLETED"})
    deadline = time.monotonic() + 30
    while (
        slurm.charged_gpu_minutes(account=account.name) * 60 < 4 * 20
        and time.monotonic() < deadline
    ):
        time.sleep(1)
    charged = slurm.charged_gpu_minutes(account=account.name) * 60
    assert charged >= 4 * 20, f"4 CPUs for 20 s cost {charged} GPU-seconds"
    cluster_sync(backend=slurm, account_names=[account.name])
    usage = {u.account: u for u in account_usage(backend=slurm)}[account.name]
    assert abs(usage.platform_gpu_hours - usage.scheduler_gpu_hours) * 3600 < 2, usage


def _leftovers(player, marker: str) -> list[str]:
    ps = subprocess.run(
        ["pgrep", "-u", player.user, "-a", "-f", marker],
        capture_output=True,
        text=True,
        check=False,
    )
    return ps.stdout.splitlines()


@pytest.mark.parametrize("ending", ["completes", "is-cancelled"])
def test_a_jobs_processes_end_with_the_job(players, ending):
    mallory = players("sec_stray")
    marker = f"31337{'1' if ending == 'completes' else '2'}"
    script = f"setsid nohup sleep {marker} >/dev/null 2>&1 < /dev/null & sleep {2 if ending == 'completes' else 300}"
    job = sbatch(mallory, "-t", "5", "--gres=gpu:1", script=script).stdout.strip()
    assert job.isdigit()
    deadline = time.monotonic() + 60
    while not _leftovers(mallory, marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _leftovers(mallory, marker), "the job never started its child"
    if ending == "is-cancelled":
        mallory.attack(f"scancel {job}")
    wait_state(job, {"COMPLETED", "CANCELLED"})
    deadline = time.monotonic() + 30
    while _leftovers(mallory, marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _leftovers(mallory, marker) == [], "a process of the job outlived it"


def test_a_job_is_held_to_the_memory_it_was_given(players):
    """A job that asked for (and pays for) 200 MB cannot take more of the node's memory: the
    kernel ends it as out of memory, and the agent's next job runs as usual."""
    mallory = players("sec_mem")
    hog = '/usr/bin/python3 -c "b = bytearray(600 * 1024 * 1024); print(len(b))"'
    job = sbatch(mallory, "--mem=200", "--gres=gpu:0", "-t", "2", script=hog).stdout.strip()
    assert job.isdigit()
    assert wait_state(job, {"OUT_OF_MEMORY", "FAILED", "COMPLETED"}) == "OUT_OF_MEMORY"
    fine = sbatch(mallory, "--mem=200", "--gres=gpu:0", "-t", "2", script="true").stdout.strip()
    assert wait_state(fine, {"COMPLETED", "FAILED"}) == "COMPLETED"
