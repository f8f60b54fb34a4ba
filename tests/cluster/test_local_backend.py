"""The local backend: real processes, the same rules as the Slurm setup, through the services."""

import os
import signal
import time
from pathlib import Path

import pytest

from cluster.backends.base import AccountLimits, JobRequest, SubmitRefused
from cluster.backends.local import LocalBackend
from cluster.models import Job
from cluster.selectors import gpu_seconds_charged
from cluster.services import (
    account_close,
    account_ensure,
    cluster_sync,
    job_cancel,
    job_submit,
    storage_measure,
)
from tests.cluster.conftest import wait_for_state

pytestmark = pytest.mark.django_db

LIMITS = AccountLimits(gpu_hours=1.0, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(log_dir=tmp_path / "scheduler")


@pytest.fixture
def account(backend):
    return account_ensure(
        name="agent_local",
        unix_user="root",
        period="phase-1",
        limits=LIMITS,
        storage_gib=1,
        backend=backend,
    )


def request_for(
    workdir: Path,
    script="echo hello from $CUDA_VISIBLE_DEVICES",
    gpus=1,
    minutes=1,
    preemptible=False,
    name="job",
):
    return JobRequest(name=name, script=script, nodes=1, gpus_per_node=gpus, time_limit_minutes=minutes,
                      preemptible=preemptible, workdir=workdir)  # fmt: skip


def test_a_job_runs_with_its_gpus_and_is_charged_once(backend, account, tmp_path):
    job = job_submit(
        account=account,
        request=request_for(tmp_path, script="sleep 1; echo gpus=$CUDA_VISIBLE_DEVICES", gpus=2),
        backend=backend,
    )
    wait_for_state(job, {"COMPLETED"}, backend=backend, timeout_s=20)
    assert "gpus=0,1" in Path(job.stdout_path).read_text()
    cluster_sync(backend=backend)  # a second sync charges nothing more
    assert job.segments.count() == 1
    charged = gpu_seconds_charged(account)
    assert charged == 2 * job.segments.get().elapsed_seconds >= 2
    assert charged / 60 == pytest.approx(backend.charged_gpu_minutes(account="agent_local"))


def test_a_ninth_gpu_waits_and_the_preemptible_qos_gives_eight_more(backend, account, tmp_path):
    running = job_submit(
        account=account,
        request=request_for(tmp_path, script="sleep 30", gpus=8, name="big"),
        backend=backend,
    )
    ninth = job_submit(
        account=account,
        request=request_for(tmp_path, script="true", gpus=1, name="ninth"),
        backend=backend,
    )
    extra = job_submit(
        account=account,
        request=request_for(tmp_path, script="sleep 30", gpus=8, preemptible=True, name="extra"),
        backend=backend,
    )
    cluster_sync(backend=backend)
    for job in (running, ninth, extra):
        job.refresh_from_db()
    assert running.state == "RUNNING" and extra.state == "RUNNING"
    assert ninth.state == "PENDING"
    assert "maximum number of GPUs at once" in ninth.reason
    job_cancel(job=running, backend=backend)
    job_cancel(job=extra, backend=backend)
    wait_for_state(ninth, {"COMPLETED"}, backend=backend, timeout_s=20)


def test_a_job_that_could_overrun_the_budget_is_refused_and_says_why(backend, account, tmp_path):
    with pytest.raises(SubmitRefused) as refused:
        job_submit(
            account=account, request=request_for(tmp_path, gpus=2, minutes=31), backend=backend
        )
    assert refused.value.message == (
        "the job would overrun the account's GPU-hour budget: its 2 GPU(s) for up to 31 min could use "
        "1.03 GPU-h and 1.00 of 1 GPU-h are left"
    )


def test_a_job_waits_while_running_jobs_reserve_the_rest_of_the_budget(backend, account, tmp_path):
    script = "sleep 30"
    running = job_submit(
        account=account,
        request=request_for(tmp_path, script=script, gpus=2, minutes=20),
        backend=backend,
    )
    waiting = job_submit(
        account=account, request=request_for(tmp_path, gpus=2, minutes=20), backend=backend
    )
    cluster_sync(backend=backend)
    waiting.refresh_from_db()
    assert waiting.state == "PENDING"
    assert "GPU-hour budget" in waiting.reason
    job_cancel(job=running, backend=backend)


def test_a_time_limit_above_the_maximum_is_refused_at_submit(account, backend, tmp_path):
    with pytest.raises(SubmitRefused, match="above the maximum of 24 h per job"):
        job_submit(account=account, request=request_for(tmp_path, minutes=25 * 60), backend=backend)
    assert not Job.objects.exists()


def test_a_running_job_can_be_cancelled(backend, account, tmp_path):
    job = job_submit(
        account=account,
        request=request_for(tmp_path, script="sleep 300", minutes=1),
        backend=backend,
    )
    wait_for_state(job, {"RUNNING"}, backend=backend, timeout_s=20)
    job_cancel(job=job, backend=backend)
    wait_for_state(job, {"CANCELLED"}, backend=backend, timeout_s=20)


def test_a_job_whose_wrapper_died_halfway_through_recording_its_end_still_ends(
    backend, account, tmp_path
):
    # A cancel signals the wrapper too; one killed inside `date > end` left an empty end file,
    # and the job stayed RUNNING for good (seen in CI under load).
    job = job_submit(
        account=account,
        request=request_for(tmp_path, script="sleep 300", minutes=1),
        backend=backend,
    )
    wait_for_state(job, {"RUNNING"}, backend=backend, timeout_s=20)
    folder = backend.root / "jobs" / job.scheduler_id
    deadline = time.monotonic() + 20
    while not (folder / "job-pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in ("job-pid", "pid"):
        os.killpg(int((folder / name).read_text()), signal.SIGKILL)
    (folder / "end").write_text("")  # what the killed `date > end` left
    job_cancel(job=job, backend=backend)
    job = wait_for_state(job, {"CANCELLED"}, backend=backend, timeout_s=20)
    assert job.ended_at is not None


def test_over_the_storage_quota_jobs_are_refused_until_usage_falls(backend, account, tmp_path):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    big = sandbox / "weights.bin"
    with big.open("wb") as out:
        out.truncate(0)
        out.write(b"\0" * (1024**3 + 4096))  # just over the 1 GiB quota, on disk
    storage_measure(account=account, path=sandbox, backend=backend)
    assert "over the storage quota of 1 GiB" in account.storage_blocked_reason
    with pytest.raises(SubmitRefused, match="storage quota"):
        job_submit(account=account, request=request_for(tmp_path), backend=backend)
    big.unlink()
    storage_measure(account=account, path=sandbox, backend=backend)
    assert account.storage_blocked_reason == "" and account.blocked_reason == ""
    job_submit(account=account, request=request_for(tmp_path), backend=backend)


def test_going_back_under_the_storage_quota_does_not_reopen_a_closed_account(backend, tmp_path):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    account = account_ensure(
        name="agent_closed", unix_user="root", period="phase-1", limits=LIMITS,
        storage_gib=0, storage_path=sandbox, backend=backend,
    )  # fmt: skip
    (sandbox / "notes.txt").write_text("over a quota of 0 GiB")
    storage_measure(account=account, backend=backend)
    assert account.storage_blocked_reason
    account_close(account=account, reason="the agent was deprovisioned", backend=backend)
    (sandbox / "notes.txt").unlink()
    storage_measure(account=account, backend=backend)
    assert account.storage_blocked_reason == ""
    assert account.blocked_reason == "the agent was deprovisioned"
    with pytest.raises(SubmitRefused, match="deprovisioned"):
        job_submit(account=account, request=request_for(tmp_path), backend=backend)
    # The scheduler refuses it too, whoever submits.
    with pytest.raises(SubmitRefused, match="may not submit"):
        backend.submit(account="agent_closed", unix_user="root", request=request_for(tmp_path))


def test_nodes_and_queue_show_running_and_waiting_jobs(backend, account, tmp_path):
    running = job_submit(
        account=account, request=request_for(tmp_path, script="sleep 30", gpus=8), backend=backend
    )
    waiting = job_submit(
        account=account, request=request_for(tmp_path, script="sleep 30", gpus=1), backend=backend
    )
    wait_for_state(running, {"RUNNING"}, backend=backend, timeout_s=20)
    [node] = backend.nodes()
    assert (node.name, node.gpus_allocated) == ("localhost", 8)
    queue = {job.scheduler_id: job for job in backend.queue()}
    assert queue[running.scheduler_id].state == "RUNNING"
    assert queue[running.scheduler_id].node_list == "localhost"
    assert queue[waiting.scheduler_id].state == "PENDING"
    assert "maximum number of GPUs at once" in queue[waiting.scheduler_id].reason
    assert queue[waiting.scheduler_id].user == "root"
    backend.cancel_all(account="agent_local")
