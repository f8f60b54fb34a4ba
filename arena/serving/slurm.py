"""Slurm serving backend: each contestant's model server is a GPU job on the cluster.

In production the job runs vLLM's OpenAI-compatible server; the command is a setting
(`ARENA_SERVING_SLURM_COMMAND`, shell, with `$CHECKPOINT`, `$PORT` and `$SERVED_MODEL_NAME`),
so the test cluster can run `transformers serve` (behind arena/serving/guard.py) on its fake
GPUs instead. The job picks a free port on its node, starts the server, and writes where it
listens to `endpoint.json` in its folder only once it has checked that the port's listening
socket is the server's own (an agent's job on the node could listen there first: see
JOB_SCRIPT); the backend waits for that file and for `/health` (the guard's challenge, or
vLLM's open `/health`: the key is never sent to check readiness), then hands the arena an
ordinary endpoint. Stopping
cancels the jobs. Jobs run under the organizers' serving account, as the platform's user.

A server listens on its node's address, where agents' jobs run too, so it answers only the
holder of its key: the backend writes a new key per server to a 0600 file in the job's private
folder, and the job script exports it as `VLLM_API_KEY` (vLLM's `--api-key`) and
`ARENA_SERVE_KEY` (the guard's). It never appears on a command line (`ps`), in the sbatch
script, or in the job's environment as Slurm records it. The model is served under an opaque
name (`$SERVED_MODEL_NAME`), and the job is named after it, not after the checkpoint.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

from arena.serving.backends import ServingBackend
from arena.serving.client import Endpoint
from arena.serving.local import ServerStartError, authorized_health, serving_secrets
from arena.serving.vllm import open_health as _open_health
from cluster.backends.base import AccountLimits, ClusterBackend, JobRequest, SubmitRefused
from cluster.models import ClusterAccount, Job
from cluster.selectors import job_output
from cluster.services import account_ensure, cluster_sync, job_cancel, job_submit

SERVING_ACCOUNT = "organizer_serving"
SERVING_GPU_HOURS = 10_000  # the organizers' serving budget per period; a setting at a real site

# Bash, run as the job. `{command}` is the configured server command.
#
# The server binds $PORT some seconds after the job picked it (after loading the model), and
# agents' jobs share the node: an agent listening there first would be where the platform sends
# its requests. So the server runs in the background, and endpoint.json is written only once the
# port's listening socket is the server's own (VERIFY_LISTENER: its inode is among the open
# files of the server's processes, and its owner is this job's user). Someone else on the port:
# the server is stopped and started again on another port, a few times, then the job fails.
JOB_SCRIPT = """#!/bin/bash
{memory}set -euo pipefail
ADDRESS=$(scontrol show node "$SLURMD_NODENAME" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
# The key is read from a file only the platform's user can read: never on a command line.
ARENA_SERVE_KEY=$(<serve.key)
VLLM_API_KEY=$ARENA_SERVE_KEY
export CHECKPOINT SERVED_MODEL_NAME ARENA_SERVE_KEY VLLM_API_KEY
SERVER=
trap '[ -n "$SERVER" ] && kill -TERM "$SERVER" 2>/dev/null; wait; exit 143' TERM INT
for attempt in 1 2 3; do
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
    export PORT
    {command} &
    SERVER=$!
    status=0
    python3 - "$SERVER" "$PORT" <<'VERIFY' || status=$?
{verify}VERIFY
    if [ "$status" = 0 ]; then
        printf '{{"host": "%s", "port": %s}}\\n' "$ADDRESS" "$PORT" > endpoint.json.tmp
        mv endpoint.json.tmp endpoint.json
        wait "$SERVER"
        exit $?
    fi
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" || true
    if [ "$status" != 2 ]; then
        echo "the model server exited before it listened on port $PORT" >&2
        exit 1
    fi
    echo "port $PORT was taken by another user's listener; trying another port" >&2
done
echo "every port tried was taken by another user's listener" >&2
exit 1
"""

# Python, run by the job: exit 0 once the LISTEN socket on the port belongs to the server's
# processes and to this user, 2 as soon as one belongs to anyone else, 1 if the server exits.
VERIFY_LISTENER = r"""import os, sys, time
server, port = int(sys.argv[1]), int(sys.argv[2])

def tree():
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as file:
                    parent = int(file.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, todo = set(), [server]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found

def inodes(pids):
    owned = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    owned.add(target[8:-1])
        except OSError:
            continue
    return owned

def listeners():
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as file:
                rows = file.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.append((int(fields[7]), fields[9]))
    return found

def alive():
    try:
        with open(f"/proc/{server}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    except OSError:
        return False

while True:
    if not alive():
        sys.exit(1)
    seen = listeners()
    if seen:
        owned = inodes(tree())
        if any(uid != os.getuid() or inode not in owned for uid, inode in seen):
            time.sleep(0.5)
            seen, owned = listeners(), inodes(tree())
            if any(uid != os.getuid() or inode not in owned for uid, inode in seen):
                sys.exit(2)
        if seen:
            sys.exit(0)
    time.sleep(0.5)
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
        memory_mb: int | None = None,
        challenge: bool | None = None,
    ) -> None:
        self.command = command
        self.folder = folder
        self.gpus = gpus
        self.time_limit_minutes = time_limit_minutes
        self.ready_timeout_s = ready_timeout_s
        self.cluster = cluster
        self.period = period
        # Host memory for the server; None takes the cluster's default, which a cluster that
        # confines memory (cgroups) may set far below what a model server needs.
        self.memory_mb = memory_mb
        # Whether the server answers guard.py's `/health` challenge (it runs behind the guard);
        # the readiness check then needs its proof. vLLM does not: its open `/health` is asked
        # with no key, and the job's own check of the listener (VERIFY_LISTENER) vouches for it.
        self.challenge = "arena.serving.guard" in command if challenge is None else challenge
        self.jobs: list[Job] = []

    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        account = self._account()
        started: list[tuple[Job, Path, Path, Endpoint]] = []
        try:
            for checkpoint in checkpoints:
                if not (checkpoint / "config.json").exists():
                    raise ServerStartError(
                        f"{checkpoint} is not a model checkpoint (no config.json)"
                    )
                api_key, served_model_name = serving_secrets()
                folder = self.folder / served_model_name
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                folder.mkdir(mode=0o700)
                _write_private(folder / "serve.key", api_key)
                request = JobRequest(
                    name=f"serve-{served_model_name}",
                    script=JOB_SCRIPT.format(
                        command=self.command,
                        verify=VERIFY_LISTENER,
                        memory=f"#SBATCH --mem={self.memory_mb}M\n" if self.memory_mb else "",
                    ),
                    nodes=1,
                    gpus_per_node=self.gpus,
                    time_limit_minutes=self.time_limit_minutes,
                    preemptible=False,
                    workdir=folder,
                    env={
                        "CHECKPOINT": str(checkpoint.resolve()),
                        "SERVED_MODEL_NAME": served_model_name,
                        "HF_HUB_OFFLINE": "1",
                        "TRANSFORMERS_OFFLINE": "1",
                    },
                )
                try:
                    job = job_submit(account=account, request=request, backend=self.cluster)
                except SubmitRefused as refused:
                    raise ServerStartError(f"serving job refused: {refused.message}") from None
                started.append((job, folder, checkpoint, Endpoint("", served_model_name, api_key)))
            endpoints = [self._wait_ready(*each) for each in started]
        except BaseException:
            for job, *_ in started:
                job_cancel(job=job, backend=self.cluster)
            raise
        self.jobs.extend(job for job, *_ in started)
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

    def _ready(self, base_url: str, api_key: str) -> bool:
        if self.challenge:
            return authorized_health(base_url, api_key)
        return _open_health(base_url)

    def _wait_ready(self, job: Job, folder: Path, checkpoint: Path, served: Endpoint) -> Endpoint:
        deadline = time.monotonic() + self.ready_timeout_s
        where = folder / "endpoint.json"
        while time.monotonic() < deadline:
            if where.exists():
                endpoint = json.loads(where.read_text())
                base = f"http://{endpoint['host']}:{endpoint['port']}"
                if self._ready(base, served.api_key):
                    return Endpoint(f"{base}/v1", served.model, served.api_key)
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


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
