"""The local backend: jobs as processes on this machine, under the same rules as Slurm.

It is a small scheduler kept in a directory (one folder per job, one JSON file per
account), so jobs outlive the process that submitted them and any process can read their
state. Limits mirror the Slurm setup: a time limit per job (refused above it), GPUs at once
per QOS and account (the job waits), and the GPU-hour budget checked "safely" — a job whose
GPUs × time limit could overrun what is left waits, as with Slurm's `safe` enforcement.
GPUs are fake: each job gets `CUDA_VISIBLE_DEVICES` numbered from 0.

A script job runs as the account's Unix user, as on Slurm: the scheduler's own wrapper stays
root (it alone writes the job's start, end and exit code, in a folder the agent cannot reach),
and the job itself gets that user's credentials and a login environment plus its own
variables, never the platform's. It opens its output file as that user, from its working
directory, so nothing the agent planted there is written or read with root's rights. Python
callables are the platform's own code and run as the platform's user, as with submitit.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cloudpickle
from django.utils import timezone

from cluster import private_tmp
from cluster.as_user import as_user, login_environment
from cluster.backends.base import (
    MAX_QUEUED_JOBS,
    PREEMPTIBLE_QOS,
    AccountingRow,
    AccountLimits,
    ClusterBackend,
    JobRequest,
    NodeState,
    QueuedJob,
    SubmitRefused,
)
from cluster.reasons import pending_reason

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LocalBackend(ClusterBackend):
    name = "local"

    def __init__(self, *, log_dir: Path, max_queued: int = MAX_QUEUED_JOBS) -> None:
        self.root = log_dir
        self.max_queued = max_queued
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        (self.root / "accounts").mkdir(parents=True, exist_ok=True)

    # --- accounts ------------------------------------------------------------------------
    def account_apply(self, *, account: str, unix_user: str, limits: AccountLimits) -> None:
        current = self._account(account) or {"blocked": False}
        current.update(asdict(limits), unix_user=unix_user)
        self._write(self.root / "accounts" / f"{account}.json", current)

    def usage_reset(self, *, account: str) -> None:
        current = self._account(account)
        if current is None:
            raise LookupError(f"no account {account}")
        current["usage_since"] = datetime.now(UTC).isoformat()
        self._write(self.root / "accounts" / f"{account}.json", current)

    def _counts(self, account: str, row: AccountingRow) -> bool:
        """Whether a finished run counts against the account's current budget period."""
        since = (self._account(account) or {}).get("usage_since")
        return row.ended_at is not None and (
            since is None or row.ended_at >= datetime.fromisoformat(since)
        )

    def account_block(self, *, account: str, blocked: bool) -> None:
        current = self._account(account)
        if current is None:
            raise LookupError(f"no account {account}")
        current["blocked"] = blocked
        self._write(self.root / "accounts" / f"{account}.json", current)

    # --- jobs ----------------------------------------------------------------------------
    def submit(self, *, account: str, unix_user: str, request: JobRequest) -> str:
        return self._submit(account=account, unix_user=unix_user, request=request, callable_=False)

    def _submit(self, *, account: str, unix_user: str, request: JobRequest, callable_: bool) -> str:
        limits = self._account(account)
        if limits is None:
            raise SubmitRefused("you may not submit under that account")
        if limits["blocked"]:
            raise SubmitRefused("the account may not submit jobs now")
        if request.time_limit_minutes > limits["max_job_hours"] * 60:
            raise SubmitRefused(
                f"the time limit is above the maximum of {limits['max_job_hours']} h per job"
            )
        # Like Slurm's DenyOnLimit: a job that could not fit the budget left even on its own
        # is refused at once; one that fits but for running jobs' reservations waits.
        left_seconds = limits["gpu_hours"] * 3600 - self.charged_gpu_minutes(account=account) * 60
        if request.gpus * request.time_limit_minutes * 60 > left_seconds:
            raise SubmitRefused(
                "the job would overrun the account's GPU-hour budget", code="over_budget"
            )
        if not callable_ and unix_user != _current_user() and os.geteuid() != 0:
            raise SubmitRefused(
                f"jobs run as their account's user ({unix_user}): the local cluster must run as "
                "root to start them"
            )
        try:
            pwd.getpwnam(unix_user)
        except KeyError:
            raise SubmitRefused(f"the account's Unix user {unix_user} does not exist") from None
        queued = [
            m for m in self._jobs()
            if m["account"] == account and self._state(m) in {"PENDING", "RUNNING"}
        ]  # fmt: skip
        if len(queued) >= self.max_queued:
            raise SubmitRefused(
                "the account already has the most jobs it may have queued at once; wait for "
                "some to end"
            )
        bad = [k for k, v in request.env.items() if not _ENV_KEY.match(k) or "\0" in v]
        if bad:
            raise SubmitRefused(f"invalid environment variables: {', '.join(sorted(bad))}")
        job_id = str(self._next_id())
        folder = self.root / "jobs" / job_id
        # The job's user reads its script through a descriptor the wrapper opens (see _launch):
        # readable by the file's mode, while the folders above stay the platform's alone.
        (folder / "script.sh").write_text(request.script)
        (folder / "script.sh").chmod(0o644)
        meta = {
            "id": job_id,
            "name": request.name,
            "account": account,
            "unix_user": unix_user,
            "callable": callable_,
            "qos": request.qos,
            "nodes": request.nodes,
            "gpus": request.gpus,
            "time_limit_minutes": request.time_limit_minutes,
            "workdir": str(request.workdir),
            "env": request.env,
            "submitted": timezone.now().isoformat(),
        }
        self._write(folder / "meta.json", meta)
        self._schedule()
        return job_id

    def submit_callable(
        self,
        *,
        account: str,
        unix_user: str,
        request: JobRequest,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> str:
        # The same thing submitit does for Slurm: pickle the call, run it in a job, pickle
        # what it returns (or raises) next to it.
        call = request.workdir / f"callable-{uuid.uuid4().hex}.pkl"
        call.write_bytes(cloudpickle.dumps((function, args, kwargs)))
        if unix_user not in {_current_user(), "root"}:
            raise SubmitRefused(
                "Python callables run as the platform's own user; submit a script to run as "
                f"{unix_user}"
            )
        script = f"exec {shlex.quote(sys.executable)} -m cluster.backends.run_callable {shlex.quote(str(call))}\n"
        return self._submit(
            account=account,
            unix_user=_current_user(),
            request=replace(request, script=script),
            callable_=True,
        )

    def callable_result(self, *, scheduler_id: str, workdir: Path) -> Any:
        path = workdir / f"callable-result-{scheduler_id}.pkl"
        if not path.exists():
            raise RuntimeError(f"job {scheduler_id} has no result (not finished, or killed)")
        ok, value = pickle.loads(path.read_bytes())
        if not ok:
            raise value
        return value

    def cancel_all(self, *, account: str) -> None:
        for meta in self._jobs():
            if meta["account"] == account and self._state(meta) in {"PENDING", "RUNNING"}:
                self.cancel(scheduler_id=meta["id"], unix_user="")

    def cancel(self, *, scheduler_id: str, unix_user: str) -> None:
        folder = self.root / "jobs" / scheduler_id
        (folder / "cancelled").touch()
        if not (folder / "start").exists() and not (folder / "pid").exists():
            # Never started: it ends now, as Slurm gives a job cancelled while pending an end
            # time; without one, accounting would never see it finished (cluster_sync waits
            # for a finished job's end before booking it).
            (folder / "end").write_text(timezone.now().isoformat())
        elif not (folder / "end").exists():
            self._signal(folder, signal.SIGTERM)

    def cancel_everything(self, *, grace_s: float = 10.0) -> list[str]:
        """Cancel every pending or running job of every account, and wait until each one's
        processes are gone (SIGKILL after `grace_s`). Returns the ids it cancelled."""
        live = [m for m in self._jobs() if self._state(m) in {"PENDING", "RUNNING"}]
        for meta in live:
            self.cancel(scheduler_id=meta["id"], unix_user="")
        deadline = time.monotonic() + grace_s
        for meta in live:
            folder = self.root / "jobs" / meta["id"]
            while self._job_processes_alive(folder) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._job_processes_alive(folder):
                self._signal(folder, signal.SIGKILL)
        # SIGKILL is delivered at once, but a process is gone only once the kernel has torn it
        # down: wait for that, so that "cancelled" means nothing is left running.
        deadline = time.monotonic() + 5
        while any(self._job_processes_alive(self.root / "jobs" / m["id"]) for m in live):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return [m["id"] for m in live]

    def running_jobs(self) -> list[str]:
        """The jobs some of whose processes are still alive, whatever their recorded state."""
        return [
            m["id"] for m in self._jobs() if self._job_processes_alive(self.root / "jobs" / m["id"])
        ]

    def _signal(self, folder: Path, signum: int) -> None:
        """Signal the job (its own process group, led by `timeout`) and the wrapper around it:
        the wrapper alone would die and leave the job running."""
        _record_launched_job(folder)
        for name in ("job-pid", "pid"):
            pid = _read_int(folder / name)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signum)

    def _job_processes_alive(self, folder: Path) -> bool:
        return any(
            _group_alive(pid) for pid in (_read_int(folder / n) for n in ("job-pid", "pid")) if pid
        )

    def accounting(self, *, accounts: list[str], since: datetime) -> list[AccountingRow]:
        self._schedule()
        rows = []
        for meta in self._jobs():
            if meta["account"] in accounts and datetime.fromisoformat(meta["submitted"]) >= since:
                rows.append(self._row(meta))
        return rows

    def charged_gpu_minutes(self, *, account: str) -> float:
        rows = self.accounting(accounts=[account], since=datetime.min.replace(tzinfo=UTC))
        return sum(r.gpus * r.elapsed_seconds for r in rows if self._counts(account, r)) / 60

    # --- the cluster now -------------------------------------------------------------------
    def nodes(self) -> list[NodeState]:
        """This machine, the only node: it has no fixed number of GPUs (each job gets its own
        fake ones), so only the GPUs its running jobs hold are known."""
        self._schedule()
        running = [m for m in self._jobs() if self._state(m) == "RUNNING"]
        return [
            NodeState(
                name="localhost",
                state="mixed" if running else "idle",
                gpus_total=0,
                gpus_allocated=sum(m["gpus"] for m in running),
            )
        ]

    def queue(self) -> list[QueuedJob]:
        self._schedule()
        jobs = []
        for meta in self._jobs():
            row = self._row(meta)
            if row.state not in {"PENDING", "RUNNING"}:
                continue
            jobs.append(
                QueuedJob(
                    scheduler_id=row.scheduler_id,
                    account=row.account,
                    user=(self._account(row.account) or {}).get("unix_user", ""),
                    name=row.name,
                    state=row.state,
                    qos=row.qos,
                    gpus=row.gpus,
                    node_list="localhost" if row.state == "RUNNING" else "",
                    reason=pending_reason(row.reason_code),
                    elapsed_seconds=row.elapsed_seconds,
                    time_limit_minutes=row.time_limit_minutes,
                )
            )
        return jobs

    # --- the scheduler -------------------------------------------------------------------
    def _schedule(self) -> None:
        """Start every waiting job that the limits allow now, oldest first."""
        for meta in self._jobs():
            folder = self.root / "jobs" / meta["id"]
            if (folder / "start").exists() or (folder / "cancelled").exists():
                continue
            reason = self._blocking_reason(meta)
            (folder / "reason").write_text(reason)
            if not reason:
                try:
                    self._launch(meta)
                except Exception as failed:  # this job fails; the scheduler goes on for others
                    self._fail_unlaunched(folder, failed)

    def _blocking_reason(self, meta: dict) -> str:
        limits = self._account(meta["account"]) or {}
        running = [
            m
            for m in self._jobs()
            if m["account"] == meta["account"] and self._state(m) == "RUNNING"
        ]
        same_qos = sum(m["gpus"] for m in running if m["qos"] == meta["qos"])
        most = limits.get(
            "max_preemptible_gpus" if meta["qos"] == PREEMPTIBLE_QOS else "max_gpus", 0
        )
        if same_qos + meta["gpus"] > most:
            return "QOSMaxGRESPerAccount"
        used_seconds = sum(
            r.gpus * r.elapsed_seconds
            for r in map(self._row, self._jobs())
            if r.account == meta["account"] and self._counts(meta["account"], r)
        )
        reserved_seconds = sum(m["gpus"] * m["time_limit_minutes"] * 60 for m in running)
        if (
            used_seconds + reserved_seconds + meta["gpus"] * meta["time_limit_minutes"] * 60
            > limits.get("gpu_hours", 0) * 3600
        ):
            return "AssocGrpGRESMinutes"
        return ""

    def _launch(self, meta: dict) -> None:
        folder = self.root / "jobs" / meta["id"]
        devices = ",".join(str(i) for i in range(meta["gpus"]))
        user = meta.get("unix_user") or _current_user()
        output = f"slurm-{meta['id']}.out"
        job_env = {
            **meta["env"],
            "CUDA_VISIBLE_DEVICES": devices,
            "SLURM_JOB_ID": meta["id"],
            "SLURM_JOB_ACCOUNT": meta["account"],
            "SLURM_JOB_NAME": meta["name"],
            "SLURM_NNODES": str(meta["nodes"]),
            "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_SUBMIT_DIR": meta["workdir"],
        }
        # The wrapper runs as the platform: its environment is fixed, never the job's (a job's
        # BASH_ENV, PATH or LD_PRELOAD in a root shell would be root's). The job's variables
        # reach the job alone, after it became its user, through descriptor 4.
        if meta.get("callable"):
            wrapper_env = {**os.environ, **job_env}  # the platform's own code, as with submitit
            job_vars: dict[str, str] = {}
        else:
            wrapper_env = dict(WRAPPER_ENV)
            job_vars = {**login_environment(user), **job_env}
        (folder / "env.sh").write_text(
            "".join(f"export {key}={shlex.quote(value)}\n" for key, value in job_vars.items())
        )
        (folder / "env.sh").chmod(0o644)  # read through the descriptor, like script.sh
        # The job: as its user (no-op for the platform's own), from its working directory,
        # its output opened there by that user, the script read through descriptor 3. setpriv
        # keeps the descriptors; the job's shell is born with the wrapper's fixed environment.
        command = ["bash", "-c",
                   '. /dev/fd/4 && exec 4<&- && cd -- "$1" && exec bash /dev/fd/3 >>"$2" 2>&1',
                   "job", meta["workdir"], output]  # fmt: skip
        if user != _current_user():
            command = as_user(user, command, keep_descriptors=True).argv
        # An agent's job writes /tmp, /var/tmp and /dev/shm inside its storage quota, as on
        # Slurm (cluster/private_tmp.py; nothing changes for a user without a quota volume).
        private = None if meta.get("callable") else private_tmp.prepare(user, f"local-{meta['id']}")
        job = shlex.join([*(private.prefix if private else []), *command])
        q = {name: shlex.quote(str(folder / name)) for name in ("start", "end", "exit", "job-pid")}

        def record(text: str, name: str) -> str:
            # Written aside, then renamed: a cancel signals this wrapper too, and one killed
            # halfway through `date > end` left an empty end file, so the job never ended.
            return f"{text} > {q[name]}.tmp && mv -f {q[name]}.tmp {q[name]}; "

        # The wrapper (this user) records start, end and exit code itself, so the job's fate is
        # known even if the process that launched it is gone. `timeout` leads the job's own
        # process group: its pid is what cancel signals.
        now = "date -u +%Y-%m-%dT%H:%M:%S+00:00"
        wrapper = (
            record(now, "start")
            + f"timeout --signal=TERM --kill-after=10 {meta['time_limit_minutes']}m {job} "
            f"3< {shlex.quote(str(folder / 'script.sh'))} 4< {shlex.quote(str(folder / 'env.sh'))} & "
            + record("echo $!", "job-pid")
            + "wait $!; code=$?; "
            + record("echo $code", "exit")
            + (f"{shlex.join(private_tmp.release_command(private))}; " if private else "")
            + record(now, "end")
        )
        with (folder / "wrapper.log").open("ab") as log:
            process = subprocess.Popen(
                ["bash", "-c", wrapper], cwd=folder, env=wrapper_env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        (folder / "pid").write_text(str(process.pid))
        (folder / "start").touch(exist_ok=True)  # visible as running at once; the wrapper fills it

    @staticmethod
    def _fail_unlaunched(folder: Path, failed: Exception) -> None:
        now = timezone.now().isoformat()
        (folder / "wrapper.log").write_text(f"the job could not be started: {failed}\n")
        for name, text in (("start", now), ("exit", "1"), ("end", now)):
            (folder / name).write_text(text)

    def _state(self, meta: dict) -> str:
        folder = self.root / "jobs" / meta["id"]
        cancelled = (folder / "cancelled").exists()
        if (folder / "end").exists() and _read_time(folder / "end") is not None:
            if cancelled:
                return "CANCELLED"
            code = _read_int(folder / "exit")
            return {0: "COMPLETED", 124: "TIMEOUT"}.get(code if code is not None else -1, "FAILED")
        if (folder / "start").exists():
            pid = _read_int(folder / "pid")
            if pid and not _alive(pid):  # killed (cancelled) before its wrapper could finish
                (folder / "end").write_text(timezone.now().isoformat())
                return "CANCELLED" if cancelled else "FAILED"
            return "RUNNING"
        return "CANCELLED" if cancelled else "PENDING"

    def _row(self, meta: dict) -> AccountingRow:
        folder = self.root / "jobs" / meta["id"]
        state = self._state(meta)
        started = _read_time(folder / "start")
        ended = _read_time(folder / "end")
        if started is None and (folder / "start").exists():
            started = timezone.now()  # just launched; the wrapper has not written the time yet
        elapsed = int(((ended or timezone.now()) - started).total_seconds()) if started else 0
        code = _read_int(folder / "exit")
        return AccountingRow(
            scheduler_id=meta["id"],
            name=meta["name"],
            account=meta["account"],
            qos=meta["qos"],
            state=state,
            reason_code=(folder / "reason").read_text()
            if state == "PENDING" and (folder / "reason").exists()
            else "",
            nodes=meta["nodes"],
            gpus=meta["gpus"],
            time_limit_minutes=meta["time_limit_minutes"],
            workdir=meta["workdir"],
            submitted_at=datetime.fromisoformat(meta["submitted"]),
            started_at=started,
            ended_at=ended if state != "RUNNING" else None,
            elapsed_seconds=max(0, elapsed),
            exit_code=f"{code}:0" if code is not None else "",
        )

    # --- storage -------------------------------------------------------------------------
    def _jobs(self) -> list[dict]:
        folders = sorted(
            (self.root / "jobs").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0
        )
        return [
            json.loads((f / "meta.json").read_text()) for f in folders if (f / "meta.json").exists()
        ]

    def _account(self, account: str) -> dict | None:
        path = self.root / "accounts" / f"{account}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def _next_id(self) -> int:
        # mkdir is atomic: the id is unique even when processes submit at the same time.
        number = (
            max(
                (int(p.name) for p in (self.root / "jobs").iterdir() if p.name.isdigit()), default=0
            )
            + 1
        )
        while True:
            try:
                (self.root / "jobs" / str(number)).mkdir()
                return number
            except FileExistsError:
                number += 1

    @staticmethod
    def _write(path: Path, data: dict) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _read_time(path: Path) -> datetime | None:
    try:
        return datetime.fromisoformat(path.read_text().strip())
    except (FileNotFoundError, ValueError):  # absent, empty or cut short: not recorded
        return None


# What the scheduler's own wrapper runs with, whoever's job it wraps.
WRAPPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _record_launched_job(folder: Path) -> None:
    """Record the job's pid when its wrapper has launched it but not yet written `job-pid`.

    The job is RUNNING from the wrapper's start, and the wrapper writes the pid only after
    `timeout` has forked and moved into a process group of its own. A cancel in that moment
    would signal the wrapper's group alone, and the job, outside it, would never be signalled
    or seen alive again. The job is the wrapper's `timeout` child leading its own group (one
    still in the wrapper's group dies with it)."""
    if (folder / "job-pid").exists():
        return
    wrapper = _read_int(folder / "pid")
    if not wrapper:
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        command = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp ...
        if command == "timeout" and int(fields[1]) == wrapper and fields[2] == entry.name:
            found = folder / "job-pid.found"  # not the wrapper's own job-pid.tmp
            found.write_text(entry.name)
            found.replace(folder / "job-pid")  # the wrapper may write the same pid: either wins
            return


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies awaiting a reap don't count)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command, which may hold spaces and parentheses: state ppid pgrp.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process counts as gone.
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return waited == 0
