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

The worker keeps them up through `maintain` (README: "Keeping Slurm servers up"): a server
that is lost (its job ended or was requeued, its health checks fail) or whose job nears its
time limit gets a replacement job; once that is healthy the contestant is moved to it, and the
old job is cancelled after the battles streaming from it have finished.

A server listens on its node's address, where agents' jobs run too, so it answers only the
holder of its key: the backend writes a new key per server to a 0600 file in the job's private
folder, and the job script exports it as `VLLM_API_KEY` (vLLM's `--api-key`) and
`ARENA_SERVE_KEY` (the guard's). It never appears on a command line (`ps`), in the sbatch
script, or in the job's environment as Slurm records it. The model is served under an opaque
name (`$SERVED_MODEL_NAME`), and the job is named after it, not after the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

from django.utils import timezone

from arena.serving.backends import (
    LOST,
    OLD_STOPPED,
    REPLACEMENT_FAILED,
    REPLACEMENT_READY,
    REPLACEMENT_STARTED,
    SWAPPED,
    EndpointKeeper,
    ServerChange,
    ServingBackend,
)
from arena.serving.client import Endpoint
from arena.serving.local import ServerStartError, authorized_health, serving_secrets
from arena.serving.vllm import (
    CheckpointConfigError,
    VllmOptions,
    architecture_flags,
    checkpoint_architecture,
    with_model_flags,
)
from arena.serving.vllm import open_health as _open_health
from cluster.backends import cluster_backend
from cluster.backends.base import ClusterBackend, JobRequest, SubmitRefused
from cluster.models import ClusterAccount, Job
from cluster.selectors import job_output
from cluster.services import cluster_sync, job_cancel, job_submit, platform_account_ensure

SERVING_ACCOUNT = "organizer_serving"
SERVING_GPU_HOURS = 10_000  # the organizers' serving budget per period; a setting at a real site

# Accounting read this recently is fresh enough for a round of the worker's health checks.
ACCOUNTING_FRESH_S = 2.0

# Bash, run as the job. `{command}` is the configured server command.
#
# The server binds $PORT some seconds after the job picked it (after loading the model), and
# agents' jobs share the node: an agent listening there first would be where the platform sends
# its requests. So the server runs in the background, and endpoint.json is written only once the
# port's listening socket is the server's own (VERIFY_LISTENER: its inode is among the open
# files of the server's processes, and its owner is this job's user). Someone else on the port:
# the server is stopped and started again on another port, a few times, then the job fails.
JOB_SCRIPT = """#!/bin/bash
{directives}set -euo pipefail
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


@dataclass
class ServerJob:
    """One serving job: a model server this backend started, ready or not yet."""

    job: Job
    folder: Path
    checkpoint: Path
    endpoint: Endpoint  # its base_url is "" until the server is ready
    submitted: float  # time.monotonic() at submission
    node: str = ""  # where it runs, once ready
    requeues: int = 0  # the job's requeues when it became ready: one more and it was lost
    failed_checks: int = 0  # health checks failed in a row
    next_check: float = 0.0
    swapped_at: datetime | None = None  # when the model left it for a replacement
    drain_until: float = 0.0


@dataclass
class ServedModel:
    """A checkpoint this backend keeps served: the server the arena uses now, the one that is
    to replace it, and old ones left to finish the battles they stream."""

    checkpoint: Path
    current: ServerJob
    replacement: ServerJob | None = None
    replacing_because: str = ""
    lost_because: str = ""  # the current server is gone (the model is withdrawn meanwhile)
    draining: list[ServerJob] = field(default_factory=list)
    retry_at: float = 0.0


class SlurmServingBackend(ServingBackend):
    _accounting_synced_at: ClassVar[float] = float("-inf")  # shared by the worker's backends

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
        renew_margin_s: float = 45 * 60,
        drain_timeout_s: float = 600,
        health_interval_s: float = 15,
        max_failed_checks: int = 3,
        retry_after_s: float = 60,
        sbatch_options: tuple[str, ...] = (),
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
        # A replacement is started this long before a job's time limit: long enough for it to
        # wait in the queue, load its model (ready_timeout_s) and for the old server to finish
        # the battles it streams (drain_timeout_s).
        self.renew_margin_s = renew_margin_s
        self.drain_timeout_s = drain_timeout_s
        self.health_interval_s = health_interval_s
        self.max_failed_checks = max_failed_checks
        self.retry_after_s = retry_after_s
        # More of sbatch's options for every serving job (`--constraint=h100`, `--exclude=…`).
        self.sbatch_options = sbatch_options
        self.models: list[ServedModel] = []
        self._serving_account: ClusterAccount | None = None

    @property
    def jobs(self) -> list[Job]:
        """Every job this backend holds: current servers, replacements, draining old ones."""
        found = []
        for model in self.models:
            found.append(model.current.job)
            if model.replacement is not None:
                found.append(model.replacement.job)
            found.extend(old.job for old in model.draining)
        return found

    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        started: list[ServerJob] = []
        try:
            for checkpoint in checkpoints:
                started.append(self._submit(checkpoint))
            for server in started:
                self._wait_ready(server)
        except BaseException:
            for server in started:
                self._cancel(server)
            raise
        self.models.extend(ServedModel(server.checkpoint, server) for server in started)
        return [server.endpoint for server in started]

    def stop(self) -> None:
        while self.models:
            model = self.models.pop()
            for server in [model.current, model.replacement, *model.draining]:
                if server is not None:
                    self._cancel(server)

    def maintain(self, keeper: EndpointKeeper) -> list[ServerChange]:
        """Health-check every server; replace one that is lost (its job ended or was requeued,
        or it failed `max_failed_checks` checks in a row) or whose job nears its time limit;
        move the model to the replacement once it is healthy; stop an old server once the
        battles that may stream from it are done. One step per call: nothing here waits for a
        model to load."""
        if not self.models:
            return []
        self._sync_accounting()
        changes: list[ServerChange] = []
        for model in self.models:
            changes.extend(self._keep(model, keeper))
        return changes

    def _keep(self, model: ServedModel, keeper: EndpointKeeper) -> list[ServerChange]:
        changes = []
        for old in list(model.draining):
            assert old.swapped_at is not None
            busy = keeper.in_flight(old.endpoint, since=old.swapped_at)
            if busy and time.monotonic() < old.drain_until:
                continue
            self._cancel(old)
            model.draining.remove(old)
            reason = (
                f"the drain timeout ({self.drain_timeout_s:g} s) passed with battles still on it"
                if busy
                else "no battle streams from it any more"
            )
            changes.append(ServerChange(OLD_STOPPED, reason, _described(old)))

        current = model.current
        if not model.lost_because:
            lost = self._lost_because(current)
            if lost:
                model.lost_because = lost
                keeper.withdraw(current.endpoint)
                # A requeued job would hold a GPU for a server no one asks any more.
                self._cancel(current, requeued_too=True)
                changes.append(ServerChange(LOST, lost, _described(current)))

        if model.replacement is None and time.monotonic() >= model.retry_at:
            because = model.lost_because or self._renewal_due(current)
            if because:
                try:
                    # A server lost with its node is replaced elsewhere: the node may come
                    # back (ReturnToService) and fail again.
                    avoid = current.node if model.lost_because else ""
                    model.replacement = self._submit(model.checkpoint, avoid=avoid)
                except ServerStartError as refused:
                    model.retry_at = time.monotonic() + self.retry_after_s
                    changes.append(ServerChange(REPLACEMENT_FAILED, str(refused)))
                    return changes
                model.replacing_because = because
                changes.append(
                    ServerChange(REPLACEMENT_STARTED, because, _described(model.replacement))
                )

        if model.replacement is not None:
            new = model.replacement
            try:
                ready = self._poll_ready(new)
            except ServerStartError as failed:
                self._cancel(new)
                model.replacement = None
                model.retry_at = time.monotonic() + self.retry_after_s
                changes.append(ServerChange(REPLACEMENT_FAILED, str(failed), _described(new)))
                return changes
            if ready:
                changes.append(
                    ServerChange(REPLACEMENT_READY, model.replacing_because, _described(new))
                )
                keeper.move(current.endpoint, new.endpoint)
                model.current, model.replacement = new, None
                changes.append(
                    ServerChange(
                        SWAPPED,
                        model.replacing_because,
                        f"from {_described(current)} to {_described(new)}",
                    )
                )
                if model.lost_because:
                    model.lost_because = ""  # its job was cancelled when it was found lost
                else:
                    # Battles that read the old endpoint before the move finish on it.
                    current.swapped_at = timezone.now()
                    current.drain_until = time.monotonic() + self.drain_timeout_s
                    model.draining.append(current)
        return changes

    def _sync_accounting(self) -> None:
        """The serving account's jobs from the scheduler's accounting, once per worker round:
        the worker keeps one backend per contestant and calls them one after the other."""
        if time.monotonic() - SlurmServingBackend._accounting_synced_at < ACCOUNTING_FRESH_S:
            return
        cluster_sync(backend=self.cluster, account_names=[SERVING_ACCOUNT])
        SlurmServingBackend._accounting_synced_at = time.monotonic()

    def _lost_because(self, server: ServerJob) -> str:
        """Why the server the arena uses is gone, or "" while it is fine."""
        job = server.job
        job.refresh_from_db()
        if job.finished:
            why = {
                Job.State.NODE_FAIL: ": its node failed",
                Job.State.TIMEOUT: ": it reached its time limit",
                Job.State.OUT_OF_MEMORY: ": it ran out of memory",
            }.get(job.state, "")
            return f"its job {job.scheduler_id} ended {job.state}{why}"
        if job.requeues > server.requeues or (
            job.started_at is not None and job.state != Job.State.RUNNING
        ):
            # Slurm requeues a job whose node failed (the platform submits with --requeue):
            # whenever it runs again, it is a new server on a new port with no endpoint given.
            return (
                f"its job {job.scheduler_id} was requeued (its node failed, or it was"
                f" preempted) and is {job.state} now"
            )
        now = time.monotonic()
        if now < server.next_check:
            return ""
        server.next_check = now + self.health_interval_s
        if self._ready(server.endpoint.base_url.removesuffix("/v1"), server.endpoint.api_key):
            server.failed_checks = 0
            return ""
        server.failed_checks += 1
        if server.failed_checks >= self.max_failed_checks:
            return f"its server failed {server.failed_checks} health checks in a row"
        return ""

    def _renewal_due(self, server: ServerJob) -> str:
        """Why the server needs a successor now (its time limit is near), or ""."""
        job = server.job
        # Before accounting has the start, the submission is an earlier, safe stand-in.
        began = job.started_at or job.submitted_at
        left = (began + timedelta(minutes=job.time_limit_minutes) - timezone.now()).total_seconds()
        if left > self.renew_margin_s:
            return ""
        return (
            f"its job {job.scheduler_id} reaches its {job.time_limit_minutes}-minute time limit"
            f" in {max(left, 0):.0f} s"
        )

    def _account(self) -> ClusterAccount:
        if self._serving_account is None:
            self._serving_account = platform_account_ensure(
                name=SERVING_ACCOUNT,
                period=self.period,
                gpu_hours=SERVING_GPU_HOURS,
                backend=self.cluster,
            )
        return self._serving_account

    def _submit(self, checkpoint: Path, *, avoid: str = "") -> ServerJob:
        """Submit a server for `checkpoint`, with a new key, name and folder, not on the node
        `avoid` if one is named; not waited for."""
        if not (checkpoint / "config.json").exists():
            raise ServerStartError(f"{checkpoint} is not a model checkpoint (no config.json)")
        command = self.server_command(checkpoint)
        account = self._account()
        options = [*self.sbatch_options]
        if self.memory_mb:
            options.append(f"--mem={self.memory_mb}M")
        if avoid:
            options.append(f"--exclude={avoid}")
        api_key, served_model_name = serving_secrets()
        folder = self.folder / served_model_name
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
        _write_private(folder / "serve.key", api_key)
        request = JobRequest(
            name=f"serve-{served_model_name}",
            script=JOB_SCRIPT.format(
                command=command,
                verify=VERIFY_LISTENER,
                directives="".join(f"#SBATCH {option}\n" for option in options),
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
        return ServerJob(
            job=job,
            folder=folder,
            checkpoint=checkpoint,
            endpoint=Endpoint("", served_model_name, api_key),
            submitted=time.monotonic(),
        )

    def server_command(self, checkpoint: Path) -> str:
        """The configured command, with the engine settings a hybrid Mamba checkpoint needs
        placed after its `vllm serve` (arena/serving/vllm.py `architecture_flags`); a dense
        checkpoint's is the setting as it stands."""
        try:
            architecture = checkpoint_architecture(checkpoint)
        except CheckpointConfigError as refused:
            raise ServerStartError(f"{checkpoint.name}: {refused}") from None
        return with_model_flags(self.command, architecture_flags(architecture, VllmOptions()))

    def _cancel(self, server: ServerJob, *, requeued_too: bool = False) -> None:
        """Cancel the server's job. `requeued_too`: even one whose run ended: Slurm requeues a
        job whose node failed (accounting says NODE_FAIL while it waits to run again), and it
        would start a server no one asks, on a GPU, when it does."""
        job = server.job
        job.refresh_from_db()
        if requeued_too and job.finished:
            with contextlib.suppress(Exception):  # it may be over for good: nothing to cancel
                (self.cluster or cluster_backend()).cancel(
                    scheduler_id=job.scheduler_id, unix_user=job.account.unix_user
                )
            return
        job_cancel(job=job, backend=self.cluster)

    def _ready(self, base_url: str, api_key: str) -> bool:
        if self.challenge:
            return authorized_health(base_url, api_key)
        return _open_health(base_url)

    def _poll_ready(self, server: ServerJob) -> bool:
        """Whether the server is ready now (its endpoint is then filled in); ServerStartError
        once its job ended or it was not ready in `ready_timeout_s`."""
        where = server.folder / "endpoint.json"
        served = server.endpoint
        if where.exists():
            endpoint = json.loads(where.read_text())
            base = f"http://{endpoint['host']}:{endpoint['port']}"
            if self._ready(base, served.api_key):
                server.endpoint = Endpoint(f"{base}/v1", served.model, served.api_key)
                server.next_check = time.monotonic() + self.health_interval_s
                server.job.refresh_from_db()
                server.requeues = server.job.requeues
                server.node = self._node_of(server.job)
                return True
        job = server.job
        job.refresh_from_db()
        if job.finished:
            tail = job_output(job, tail_bytes=2000)
            raise ServerStartError(
                f"serving job {job.scheduler_id} for {server.checkpoint.name} ended"
                f" {job.state}:\n{tail}"
            )
        if time.monotonic() - server.submitted > self.ready_timeout_s:
            raise ServerStartError(
                f"serving job {job.scheduler_id} for {server.checkpoint.name} not ready after"
                f" {self.ready_timeout_s:g} s ({job.state}{': ' + job.reason if job.reason else ''})"
            )
        return False

    def _node_of(self, job: Job) -> str:
        cluster = self.cluster or cluster_backend()
        for queued in cluster.queue():
            if queued.scheduler_id == job.scheduler_id:
                return queued.node_list
        return ""

    def _wait_ready(self, server: ServerJob) -> None:
        while not self._poll_ready(server):
            cluster_sync(backend=self.cluster, account_names=[SERVING_ACCOUNT])
            time.sleep(1)


def _described(server: ServerJob) -> str:
    where = server.endpoint.base_url.removesuffix("/v1").removeprefix("http://")
    return f"job {server.job.scheduler_id}" + (f" at {where}" if where else "")


def _write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
