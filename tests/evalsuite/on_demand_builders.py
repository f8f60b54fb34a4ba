"""Agents with a cluster account, a sandbox and registered checkpoints, for the on-demand
evaluation tests."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from agents.models import Checkpoint
from agents.services import agent_create
from cluster.backends.base import JobRequest
from cluster.models import ClusterAccount, Job
from cluster.services import job_submit_callable
from evalsuite.on_demand import _platform_member
from evalsuite.registry import benchmarks


def judged_proxy_benchmark() -> str:
    """A judge-graded benchmark agents may run (the registry's first), by name."""
    return next(b.name for b in benchmarks() if b.scorer == "judge" and not b.held_out)


def provisioned(name: str, tmp_path, *, gpu_hours: int = 10):
    account = ClusterAccount.objects.create(
        name=f"agent_{name}", unix_user=f"agent_{name}", gpu_hours_limit=Decimal(gpu_hours),
        max_gpus=8, max_preemptible_gpus=8, max_job_hours=24, storage_gib_limit=1,
    )  # fmt: skip
    sandbox = tmp_path / name
    sandbox.mkdir()
    agent = agent_create(name=name)
    agent.cluster_account, agent.sandbox = account, str(sandbox)
    agent.save()
    return agent, account


def checkpoint_of(agent, account, number: int = 1) -> Checkpoint:
    """A registered checkpoint whose folder holds the files a copy lists (the request counts
    their bytes; nothing here loads them)."""
    folder = Path(agent.sandbox) / f"ckpt-{number}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    job = Job.objects.create(
        account=account, backend="local", scheduler_id=f"{agent.name}-{number}", name="sft",
        qos="normal", nodes=1, gpus=1, time_limit_minutes=10, workdir="/tmp", script="",
        stdout_path="", state="COMPLETED",
    )  # fmt: skip
    return Checkpoint.objects.create(
        agent=agent, path=f"ckpt-{number}", job=job, architecture="LlamaForCausalLM",
        parameters=1, end_of_turn_token="<|im_end|>", weights_sha256=f"{number}" * 64,
    )  # fmt: skip


def gpu_held(account, backend, tmp_path) -> Job:
    """A job of the agent's account holding one GPU for a minute (a callable: it runs as the
    platform's user, as the evaluation job does)."""
    workdir = tmp_path / "holder"
    workdir.mkdir()
    request = JobRequest(name="hold", script="", nodes=1, gpus_per_node=1,
                         time_limit_minutes=2, preemptible=False, workdir=workdir)  # fmt: skip
    member = _platform_member(account, backend)
    return job_submit_callable(account=member, request=request, function=time.sleep,
                               args=(60,), backend=backend)  # fmt: skip
