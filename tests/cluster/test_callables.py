"""Python callables as jobs: submitit on the real Slurm cluster, a pickled call locally."""

import pytest

from cluster.backends.base import AccountLimits, JobRequest
from cluster.backends.local import LocalBackend
from cluster.selectors import gpu_seconds_charged, job_result
from cluster.services import account_ensure, job_submit_callable
from tests.cluster.conftest import settled_usage_seconds, wait_for_state

LIMITS = AccountLimits(gpu_hours=10, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)


def request(workdir):
    return JobRequest(name="callable", script="", nodes=1, gpus_per_node=2, time_limit_minutes=5,
                      preemptible=False, workdir=workdir, env={"GREETING": "hello world"})  # fmt: skip


def make_call(pause_s: float = 0):
    def where_am_i(x):  # nested, so it travels by value, not by import
        import os
        import time

        time.sleep(pause_s)  # long enough to be charged whole seconds

        return {
            "double": 2 * x,
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "greeting": os.environ.get("GREETING"),
        }

    return where_am_i


@pytest.mark.django_db
def test_a_callable_runs_as_a_local_job_and_returns_its_value(tmp_path):
    backend = LocalBackend(log_dir=tmp_path / "scheduler")
    account = account_ensure(
        name="agent_callable",
        unix_user="root",
        period="p",
        limits=LIMITS,
        storage_gib=1,
        backend=backend,
    )
    job = job_submit_callable(
        account=account,
        request=request(tmp_path),
        function=make_call(),
        args=(21,),
        backend=backend,
    )
    wait_for_state(job, {"COMPLETED"}, backend=backend, timeout_s=60)
    assert job_result(job, backend=backend) == {
        "double": 42,
        "gpus": "0,1",
        "greeting": "hello world",
    }


@pytest.mark.slow
def test_a_callable_runs_on_slurm_through_submitit(make_agent, slurm, tmp_path):
    agent = make_agent("submitit")
    agent.account.unix_user = "root"  # submitit submits as the platform's own user
    agent.account.save()
    account_ensure(
        name=agent.account.name,
        unix_user="root",
        period="test",
        limits=LIMITS,
        storage_gib=400,
        backend=slurm,
    )
    tmp_path.chmod(0o755)
    job = job_submit_callable(
        account=agent.account,
        request=request(tmp_path),
        function=make_call(pause_s=3),
        args=(21,),
        backend=slurm,
    )
    wait_for_state(job, {"COMPLETED"}, backend=slurm)
    result = job_result(job, backend=slurm)
    assert result["double"] == 42 and result["greeting"] == "hello world"
    assert len(result["gpus"].split(",")) == 2
    # Charged once, for its two GPUs over the seconds it ran, as Slurm charged the account.
    [segment] = job.segments.all()
    assert segment.elapsed_seconds >= 3
    assert job.gpu_seconds_charged == 2 * segment.elapsed_seconds
    assert gpu_seconds_charged(agent.account) == job.gpu_seconds_charged
    assert settled_usage_seconds(agent.account.name, slurm) == job.gpu_seconds_charged
