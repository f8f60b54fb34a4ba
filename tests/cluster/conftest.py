"""Fixtures for tests against the real local Slurm cluster (infra/slurm/setup.sh)."""

from __future__ import annotations

import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster.backends.base import AccountLimits, ClusterBackend, QueuedJob
from cluster.backends.slurm import SlurmBackend
from cluster.models import ClusterAccount, Job
from cluster.services import account_ensure, cluster_sync
from cluster.slurm import cli
from tests.support.workers import worker_name, worker_path

SANDBOX_ROOT = worker_path("/tmp/arena-cluster-tests")
DEFAULT_LIMITS = AccountLimits(gpu_hours=1000, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)


def _unix_user(name: str) -> str:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    return name


@dataclass
class Agent:
    account: ClusterAccount
    sandbox: Path

    @property
    def user(self) -> str:
        return self.account.unix_user


@pytest.fixture
def make_agent(slurm: SlurmBackend, transactional_db: None) -> Iterator[Callable[..., Agent]]:
    """An account with its own Unix user and sandbox; its jobs are cancelled and its Slurm
    usage reset afterwards so tests do not share budgets."""
    made: list[Agent] = []

    def make(suffix: str, limits: AccountLimits = DEFAULT_LIMITS, storage_gib: int = 400) -> Agent:
        user = _unix_user(f"arena_{worker_name('t_' + suffix)}")
        name = f"agent_{worker_name('t_' + suffix)}"
        account = account_ensure(
            name=name,
            unix_user=user,
            period="test",
            limits=limits,
            storage_gib=storage_gib,
            backend=slurm,
        )
        _reset(name)
        sandbox = SANDBOX_ROOT / user
        sandbox.mkdir(parents=True, exist_ok=True)
        shutil.chown(sandbox, user=user, group=user)
        sandbox.chmod(0o700)
        agent = Agent(account, sandbox)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        _reset(agent.account.name)
        slurm.account_block(account=agent.account.name, blocked=False)


def _reset(account: str) -> None:
    cli.run(["scancel", "-A", account], check=False)
    deadline = time.monotonic() + 30
    while cli.squeue_rows({"id": "%i"}, "-A", account) and time.monotonic() < deadline:
        time.sleep(0.2)
    cli.sacctmgr("modify", "account", "where", f"name={account}", "set", "RawUsage=0")


def wait_for_state(
    job: Job,
    states: set[str],
    *,
    backend: ClusterBackend,
    timeout_s: float = 120,
    poll_s: float = 0.2,
) -> Job:
    """Sync the backend's accounting until the job reaches one of `states`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cluster_sync(backend=backend)
        job.refresh_from_db()
        if job.state in states:
            return job
        time.sleep(poll_s)
    raise AssertionError(f"job {job.scheduler_id} stayed {job.state} ({job.reason})")


def settled_usage_seconds(account: str, slurm: SlurmBackend, timeout_s: float = 30) -> int:
    """Slurm's raw usage of the account once it stops changing (the remainder of a run is
    added when the controller processes its end)."""
    deadline = time.monotonic() + timeout_s
    last = round(slurm.charged_gpu_minutes(account=account) * 60)
    while time.monotonic() < deadline:
        time.sleep(2)
        now = round(slurm.charged_gpu_minutes(account=account) * 60)
        if now == last:
            return now
        last = now
    return last


def assoc_mgr_gpu_minutes(account: str) -> int:
    """The GPU-minutes the controller counts against the account's GrpTRESMins budget."""
    record = cli.assoc_mgr_account_record(account)
    assert record, f"no association record for {account}"
    used = re.search(r"GrpTRESMins=\S*?gres/gpu=[0-9N]+\((\d+)\)", record)
    assert used, record
    return int(used.group(1))


def queued_with_reason(slurm: SlurmBackend, scheduler_id: str, timeout_s: float = 30) -> QueuedJob:
    """The job in the scheduler's queue once it says why the job waits (at first it does not)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [job for job in slurm.queue() if job.scheduler_id == scheduler_id]
        if found and (found[0].reason or time.monotonic() > deadline):
            return found[0]
        assert time.monotonic() < deadline, f"job {scheduler_id} is not in the queue"
        time.sleep(0.5)
