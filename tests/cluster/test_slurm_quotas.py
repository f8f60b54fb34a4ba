"""Quotas hold on the real local Slurm cluster, through the platform and through plain sbatch."""

from __future__ import annotations

import time

import pytest

from arena.serving.slurm import SlurmServingBackend
from cluster.backends.base import AccountLimits, JobRequest, SubmitRefused
from cluster.models import Job
from cluster.reasons import submit_error
from cluster.selectors import account_usage, gpu_seconds_charged
from cluster.services import account_close, cluster_sync, job_submit, storage_measure
from cluster.slurm import cli
from evalsuite.services import eval_account_ensure
from tests import factories
from tests.cluster.conftest import (
    assoc_mgr_gpu_minutes,
    queued_with_reason,
    settled_usage_seconds,
    wait_for_state,
)

pytestmark = pytest.mark.slow
# The tests marked serial fill whole nodes (eight GPUs, all of n1, a node's CPUs or memory) or
# read the QOS caps every account shares: other workers' jobs would take those nodes or change
# those caps. The others use their own accounts only and run beside the rest of the suite.


def request(agent, *, gpus=1, minutes=5, script="sleep 1", preemptible=False, nodes=1, name="job"):
    return JobRequest(
        name=name, script=f"#!/bin/bash\n{script}\n", nodes=nodes, gpus_per_node=gpus,
        time_limit_minutes=minutes, preemptible=preemptible, workdir=agent.sandbox,
    )  # fmt: skip


def plain_sbatch(agent, *args: str, script: str = "true"):
    """What an agent can do by hand in its sandbox: sbatch as its own Unix user."""
    return cli.run(
        ["sbatch", "--parsable", *args, f"--chdir={agent.sandbox}", "--wrap", script],
        user=agent.user, cwd=str(agent.sandbox), check=False,
    )  # fmt: skip


def test_a_job_that_would_overrun_the_gpu_hour_budget_does_not_run_and_says_why(make_agent, slurm):
    agent = make_agent(
        "budget",
        limits=AccountLimits(gpu_hours=0.1, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24),
    )
    with pytest.raises(SubmitRefused) as refused:  # 2 GPUs x 10 min = 20 GPU-min > 6
        job_submit(account=agent.account, request=request(agent, gpus=2, minutes=10), backend=slurm)
    assert refused.value.message == (
        "the job would overrun the account's GPU-hour budget: its 2 GPU(s) for up to 10 min could use "
        "0.33 GPU-h and 0.10 of 0.1 GPU-h are left"
    )
    assert not Job.objects.exists()
    # Slurm itself holds the agent's own sbatch to the same budget.
    by_hand = plain_sbatch(agent, f"--account={agent.account.name}", "--gres=gpu:2", "-t", "10")
    assert by_hand.stdout.strip() == ""
    assert "GPU-hour budget" in submit_error(by_hand.stderr)
    small = job_submit(
        account=agent.account, request=request(agent, gpus=1, minutes=2), backend=slurm
    )
    wait_for_state(small, {"COMPLETED"}, backend=slurm)  # what fits the budget still runs


@pytest.mark.serial
def test_a_ninth_normal_gpu_does_not_run_and_the_preemptible_qos_gives_eight_more(
    make_agent, slurm
):
    agent = make_agent("gpus")
    first = job_submit(
        account=agent.account,
        request=request(agent, gpus=8, script="sleep 120", name="eight"),
        backend=slurm,
    )
    wait_for_state(first, {"RUNNING"}, backend=slurm)
    ninth = job_submit(
        account=agent.account, request=request(agent, gpus=1, name="ninth"), backend=slurm
    )
    extra = job_submit(
        account=agent.account,
        request=request(agent, gpus=8, script="sleep 120", preemptible=True, name="extra"),
        backend=slurm,
    )
    wait_for_state(extra, {"RUNNING"}, backend=slurm)
    cluster_sync(backend=slurm)
    ninth.refresh_from_db()
    assert ninth.state == "PENDING"
    assert "maximum number of GPUs at once" in ninth.reason
    # Plain sbatch is held to the same limit.
    by_hand = plain_sbatch(agent, f"--account={agent.account.name}", "--gres=gpu:1", "-t", "1")
    by_hand_id = by_hand.stdout.strip()
    assert by_hand_id
    time.sleep(1)
    [row] = cli.squeue_rows({"state": "%T", "reason": "%r"}, "-j", by_hand_id)
    assert row["state"] == "PENDING"


@pytest.mark.serial
def test_a_preempted_job_is_requeued_completes_later_and_each_run_is_charged_once(
    make_agent, slurm
):
    low = make_agent("low")
    high = make_agent("high")
    # Fill node n1 with a preemptible job, then ask for a GPU on that node at normal priority.
    victim_id = plain_sbatch(
        low, f"--account={low.account.name}", "--qos=preemptible", "--gres=gpu:8", "-w", "n1", "-t", "5",
        "--requeue", script="sleep 15",
    ).stdout.strip()  # fmt: skip
    _wait_squeue(victim_id, "RUNNING")
    time.sleep(3)
    urgent_id = plain_sbatch(
        high,
        f"--account={high.account.name}",
        "--gres=gpu:1",
        "-w",
        "n1",
        "-t",
        "2",
        script="sleep 3",
    ).stdout.strip()
    assert urgent_id
    victim = _wait_job(victim_id, {"COMPLETED"}, slurm, timeout_s=180)
    assert victim.requeues >= 1
    segments = list(victim.segments.order_by("started_at"))
    assert len(segments) == victim.requeues + 1
    assert segments[-1].state == "COMPLETED"
    assert all(s.gpus == 8 for s in segments)
    charged = gpu_seconds_charged(low.account)
    assert charged == sum(s.gpus * s.elapsed_seconds for s in segments)
    cluster_sync(backend=slurm)  # syncing again charges nothing twice
    assert gpu_seconds_charged(low.account) == charged
    # What Slurm itself charged the association for every run, to the minute: its raw usage
    # (GPU-seconds, sshare) and the GPU-minutes its budget counts (assoc_mgr).
    slurm_seconds = settled_usage_seconds(low.account.name, slurm)
    assert abs(slurm_seconds - charged) < 60, (slurm_seconds, charged)
    assert abs(assoc_mgr_gpu_minutes(low.account.name) - charged / 60) < 1


def test_a_25_hour_request_is_refused_at_submit_with_a_clear_message(make_agent, slurm):
    agent = make_agent("long")
    with pytest.raises(SubmitRefused, match="above the maximum of 24 h per job"):
        job_submit(account=agent.account, request=request(agent, minutes=25 * 60), backend=slurm)
    by_hand = plain_sbatch(agent, f"--account={agent.account.name}", "--time=25:00:00")
    assert by_hand.stdout.strip() == ""
    assert "above the maximum" in submit_error(by_hand.stderr, max_job_hours=24)
    assert not Job.objects.exists()


def test_plain_sbatch_under_another_agents_account_is_rejected(make_agent):
    mine, theirs = make_agent("mine"), make_agent("theirs")
    attempt = plain_sbatch(mine, f"--account={theirs.account.name}")
    assert attempt.stdout.strip() == ""
    assert submit_error(attempt.stderr) == "you may not submit under that account"


def test_over_the_storage_quota_new_jobs_are_refused_until_usage_falls(make_agent, slurm):
    agent = make_agent("storage", storage_gib=1)
    blob = agent.sandbox / "shard.bin"
    blob.write_bytes(b"\1" * (1024**3 + 1024**2))
    storage_measure(account=agent.account, path=agent.sandbox, backend=slurm)
    assert "over the storage quota of 1 GiB" in agent.account.storage_blocked_reason
    with pytest.raises(SubmitRefused, match="storage quota"):
        job_submit(account=agent.account, request=request(agent), backend=slurm)
    by_hand = plain_sbatch(agent, f"--account={agent.account.name}")
    assert by_hand.stdout.strip() == "", "Slurm itself refuses the agent's own sbatch"
    blob.unlink()
    storage_measure(account=agent.account, path=agent.sandbox, backend=slurm)
    assert agent.account.blocked_reason == ""
    assert plain_sbatch(agent, f"--account={agent.account.name}").stdout.strip()


def test_a_closed_account_stays_closed_when_its_storage_falls_under_the_quota(make_agent, slurm):
    agent = make_agent("closed", storage_gib=0)
    (agent.sandbox / "notes.txt").write_text("over a quota of 0 GiB")
    storage_measure(account=agent.account, path=agent.sandbox, backend=slurm)
    account_close(account=agent.account, reason="the agent was deprovisioned", backend=slurm)
    (agent.sandbox / "notes.txt").unlink()
    storage_measure(account=agent.account, path=agent.sandbox, backend=slurm)
    agent.account.refresh_from_db()
    assert agent.account.storage_blocked_reason == ""
    assert agent.account.blocked_reason == "the agent was deprovisioned"
    by_hand = plain_sbatch(agent, f"--account={agent.account.name}")
    assert by_hand.stdout.strip() == "", "Slurm still refuses the closed account's sbatch"
    assert submit_error(by_hand.stderr, blocked_reason=agent.account.blocked_reason) == (
        "the account may not submit jobs now: the agent was deprovisioned"
    )


def test_after_sync_platform_gpu_hours_equal_slurms_for_every_agent(make_agent, slurm):
    one, two = make_agent("acct1"), make_agent("acct2")
    jobs = [
        job_submit(
            account=one.account, request=request(one, gpus=2, script="sleep 65"), backend=slurm
        ),
        job_submit(
            account=two.account,
            request=request(two, gpus=3, script="sleep 65", nodes=1),
            backend=slurm,
        ),
    ]
    by_hand_id = plain_sbatch(
        two, f"--account={two.account.name}", "--gres=gpu:1", "-t", "2", script="sleep 65"
    ).stdout.strip()
    for job in jobs:
        wait_for_state(job, {"COMPLETED"}, backend=slurm, timeout_s=180)
    _wait_job(by_hand_id, {"COMPLETED"}, slurm, timeout_s=180)
    time.sleep(2)  # Slurm books usage when the job's end is processed
    cluster_sync(backend=slurm)
    usage = {u.account: u for u in account_usage(backend=slurm)}
    for agent in (one, two):
        platform_minutes = usage[agent.account.name].platform_gpu_hours * 60
        slurm_minutes = usage[agent.account.name].scheduler_gpu_hours * 60
        assert abs(platform_minutes - slurm_minutes) < 1.0, (
            agent.account.name,
            platform_minutes,
            slurm_minutes,
        )
        assert platform_minutes > 1.0
    assert Job.objects.filter(
        scheduler_id=by_hand_id, script=""
    ).exists()  # found though not submitted by us


def wait_for_reason(job: Job, slurm, timeout_s: float = 30) -> Job:
    """The job once the scheduler has said why it waits (it says nothing at first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cluster_sync(backend=slurm)
        job.refresh_from_db()
        if job.reason:
            break
        time.sleep(0.5)
    return job


def _wait_squeue(scheduler_id: str, state: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = cli.squeue_rows({"state": "%T"}, "-j", scheduler_id)
        if rows and rows[0]["state"] == state:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {scheduler_id} never reached {state}")


def _wait_job(scheduler_id: str, states: set[str], slurm, timeout_s: float = 120) -> Job:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cluster_sync(backend=slurm)
        job = Job.objects.filter(scheduler_id=scheduler_id).first()
        if job is not None and job.state in states:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {scheduler_id} did not reach {states}")


def test_an_agents_job_sees_its_own_environment_not_the_platforms(make_agent, slurm, monkeypatch):
    monkeypatch.setenv("ARENA_PLATFORM_SECRET", "not-for-agents")
    agent = make_agent("env")
    job = job_submit(
        account=agent.account,
        request=JobRequest(
            name="env", script="#!/bin/bash\nenv > seen-env.txt\n", nodes=1, gpus_per_node=1,
            time_limit_minutes=2, preemptible=False, workdir=agent.sandbox,
            env={"MY_SETTING": "kept"},
        ),
        backend=slurm,
    )  # fmt: skip
    wait_for_state(job, {"COMPLETED"}, backend=slurm)
    seen = dict(
        line.split("=", 1)
        for line in (agent.sandbox / "seen-env.txt").read_text().splitlines()
        if "=" in line
    )
    assert "ARENA_PLATFORM_SECRET" not in seen and "DATABASE_URL" not in seen
    assert seen["MY_SETTING"] == "kept" and seen["USER"] == agent.user


@pytest.mark.serial
def test_the_organizers_accounts_leave_the_agents_gpu_limits_alone(make_agent, slurm, tmp_path):
    agent = make_agent("orgs")
    # What evaluation and serving do before their jobs: apply their accounts' limits.
    evals = eval_account_ensure(phase=factories.running_phase(label="phase-orgs"), backend=slurm)
    serving = SlurmServingBackend(command="true", folder=tmp_path, cluster=slurm)._account()
    assert evals.platform and serving.platform
    first = job_submit(
        account=agent.account,
        request=request(agent, gpus=8, script="sleep 60", name="eight"),
        backend=slurm,
    )
    wait_for_state(first, {"RUNNING"}, backend=slurm)
    spare = job_submit(
        account=agent.account,
        request=request(agent, gpus=1, script="sleep 1", preemptible=True, name="spare"),
        backend=slurm,
    )
    wait_for_state(spare, {"COMPLETED"}, backend=slurm)  # the preemptible QOS still gives GPUs
    ninth = job_submit(
        account=agent.account, request=request(agent, gpus=1, name="ninth"), backend=slurm
    )
    ninth = wait_for_reason(ninth, slurm)
    assert ninth.state == "PENDING" and "maximum number of GPUs at once" in ninth.reason
    # The organizers' jobs run on their own QOS, under their own cap.
    tmp_path.chmod(0o755)
    evaluation = job_submit(
        account=evals,
        request=JobRequest(
            name="eval", script="#!/bin/bash\ntrue\n", nodes=1, gpus_per_node=1,
            time_limit_minutes=2, preemptible=False, workdir=tmp_path,
        ),
        backend=slurm,
    )  # fmt: skip
    assert evaluation.qos == "platform"
    wait_for_state(evaluation, {"COMPLETED"}, backend=slurm)
    with pytest.raises(SubmitRefused, match="no preemptible QOS"):
        job_submit(
            account=evals,
            request=JobRequest(
                name="eval", script="true", nodes=1, gpus_per_node=1, time_limit_minutes=2,
                preemptible=True, workdir=tmp_path,
            ),
            backend=slurm,
        )  # fmt: skip


@pytest.mark.serial
def test_cpus_and_memory_without_gpus_are_capped_like_gpus(make_agent, slurm):
    agent = make_agent("cpus")
    account = f"--account={agent.account.name}"
    # 10 CPUs over two nodes, no GPU: more than the 8 CPUs that go with 8 GPUs.
    wide = plain_sbatch(agent, account, "--nodes=2", "--ntasks-per-node=1", "-c", "5", "-t", "1")
    assert wide.stdout.strip() == ""
    assert submit_error(wide.stderr).startswith("the job asks for more CPUs than the account")
    # 2 x 40000 MB: more than the 64000 MB that go with 8 GPUs.
    big = plain_sbatch(agent, account, "--nodes=2", "--mem=40000", "-t", "1")
    assert big.stdout.strip() == ""
    assert submit_error(big.stderr).startswith("the job asks for more memory than the account")
    # A node's worth of CPUs is the agent's share: the next CPU waits, said in words.
    node = plain_sbatch(agent, account, "-c", "8", "-t", "1", script="sleep 60").stdout.strip()
    _wait_squeue(node, "RUNNING")
    more = plain_sbatch(agent, account, "-c", "1", "-t", "1").stdout.strip()
    assert more
    held = queued_with_reason(slurm, more)
    assert held.state == "PENDING"
    assert held.reason.startswith("the account already uses its maximum number of CPUs")
    # The caps are those of the agents' QOS, in proportion to GPUs.
    caps = {r["name"]: r["maxtrespa"] for r in cli.sacctmgr_rows("qos", ["name", "maxtrespa"])}
    assert slurm.tres_for_gpus(8) == "cpu=8,mem=64000,gres/gpu=8"
    expected = {"cpu=8", "mem=62.50G", "gres/gpu=8"}  # sacctmgr's spelling of 64000 MB
    assert set(caps["normal"].split(",")) == set(caps["preemptible"].split(",")) == expected
