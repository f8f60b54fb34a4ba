"""Slurm serving backend: each contestant's model server is a GPU job on the cluster.

In production the job runs vLLM's OpenAI-compatible server; the command is a setting
(`ARENA_SERVING_SLURM_COMMAND`, shell, with `$CHECKPOINT` and `$PORT`), so the test cluster can
run `transformers serve` on its fake GPUs instead. The job picks a free port on its node,
writes where it listens to `endpoint.json` in its folder, and becomes the server; the backend
waits for that file and for `/health`, then hands the arena an ordinary endpoint. Stopping
cancels the jobs. Jobs run under the organizers' serving account, as the platform's user.
"""

from __future__ import annotations

import json
import os
import pwd
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from arena.serving.backends import ServingBackend
from arena.serving.client import Endpoint
from arena.serving.local import ServerStartError
from cluster.backends.base import AccountLimits, ClusterBackend, JobRequest, SubmitRefused
from cluster.models import ClusterAccount, Job
from cluster.selectors import job_output
from cluster.services import account_ensure, cluster_sync, job_cancel, job_submit

SERVING_ACCOUNT = "organizer_serving"
SERVING_GPU_HOURS = 10_000  # the organizers' serving budget per period; a setting at a real site

# Bash, run as the job. `{command}` is the configured server command.
JOB_SCRIPT = """#!/bin/bash
set -euo pipefail
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
ADDRESS=$(scontrol show node "$SLURMD_NODENAME" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export PORT CHECKPOINT
printf '{{"host": "%s", "port": %s}}\\n' "$ADDRESS" "$PORT" > endpoint.json.tmp
mv endpoint.json.tmp endpoint.json
exec {command}
"""


class SlurmServingBackend(ServingBackend):
    def __init__(
        self,
        *,
        command: str,
        folder: Path,
        gpus: int = 1,
        time_limit_minutes: int = 24 * 60,
        ready_timeout_s: float = 600,
        cluster: ClusterBackend | None = None,
        period: str = "serving",
    ) -> None:
        self.command = command
        self.folder = folder
        self.gpus = gpus
        self.time_limit_minutes = time_limit_minutes
        self.ready_timeout_s = ready_timeout_s
        self.cluster = cluster
        self.period = period
        self.jobs: list[Job] = []

    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        account = self._account()
        started: list[tuple[Job, Path, Path]] = []
        try:
            for checkpoint in checkpoints:
                if not (checkpoint / "config.json").exists():
                    raise ServerStartError(
                        f"{checkpoint} is not a model checkpoint (no config.json)"
                    )
                folder = self.folder / f"serve-{checkpoint.name}-{uuid.uuid4().hex[:8]}"
                folder.mkdir(parents=True)
                request = JobRequest(
                    name=f"serve-{checkpoint.name}"[:60],
                    script=JOB_SCRIPT.format(command=self.command),
                    nodes=1,
                    gpus_per_node=self.gpus,
                    time_limit_minutes=self.time_limit_minutes,
                    preemptible=False,
                    workdir=folder,
                    env={
                        "CHECKPOINT": str(checkpoint.resolve()),
                        "HF_HUB_OFFLINE": "1",
                        "TRANSFORMERS_OFFLINE": "1",
                    },
                )
                try:
                    job = job_submit(account=account, request=request, backend=self.cluster)
                except SubmitRefused as refused:
                    raise ServerStartError(f"serving job refused: {refused.message}") from None
                started.append((job, folder, checkpoint))
            endpoints = [
                self._wait_ready(job, folder, checkpoint) for job, folder, checkpoint in started
            ]
        except BaseException:
            for job, _, _ in started:
                job_cancel(job=job, backend=self.cluster)
            raise
        self.jobs.extend(job for job, _, _ in started)
        return endpoints

    def stop(self) -> None:
        while self.jobs:
            job = self.jobs.pop()
            job.refresh_from_db()
            job_cancel(job=job, backend=self.cluster)

    def _account(self) -> ClusterAccount:
        return account_ensure(
            name=SERVING_ACCOUNT,
            unix_user=pwd.getpwuid(os.getuid()).pw_name,
            period=self.period,
            limits=AccountLimits(
                gpu_hours=SERVING_GPU_HOURS,
                max_gpus=8,
                max_preemptible_gpus=0,
                max_job_hours=24,
                platform=True,  # its own QOS: the agents' limits stay as the phase set them
            ),
            storage_gib=100,
            backend=self.cluster,
        )

    def _wait_ready(self, job: Job, folder: Path, checkpoint: Path) -> Endpoint:
        deadline = time.monotonic() + self.ready_timeout_s
        where = folder / "endpoint.json"
        while time.monotonic() < deadline:
            if where.exists():
                endpoint = json.loads(where.read_text())
                base = f"http://{endpoint['host']}:{endpoint['port']}"
                if _healthy(base):
                    # Both vLLM and `transformers serve` name the model by the path it was
                    # loaded from, which the job was given.
                    return Endpoint(base_url=f"{base}/v1", model=str(checkpoint.resolve()))
            cluster_sync(backend=self.cluster, account_names=[SERVING_ACCOUNT])
            job.refresh_from_db()
            if job.finished:
                tail = job_output(job, tail_bytes=2000)
                raise ServerStartError(
                    f"serving job {job.scheduler_id} for {checkpoint.name} ended {job.state}:\n{tail}"
                )
            time.sleep(1)
        raise ServerStartError(
            f"serving job {job.scheduler_id} for {checkpoint.name} not ready after"
            f" {self.ready_timeout_s:g} s ({job.state}{': ' + job.reason if job.reason else ''})"
        )


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False
