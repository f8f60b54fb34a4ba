"""The Slurm backend: accounts and limits with sacctmgr, jobs with sbatch, state with squeue
and sacct, charged usage with scontrol. Limits are Slurm's own, so they hold whether a job
comes through the platform or from a plain `sbatch` in the agent's sandbox."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import submitit
from django.utils import timezone

from cluster.as_user import login_environment
from cluster.backends.base import (
    MAX_QUEUED_JOBS,
    NORMAL_QOS,
    PLATFORM_QOS,
    PREEMPTIBLE_QOS,
    AccountingRow,
    AccountLimits,
    ClusterBackend,
    JobRequest,
    NodeState,
    QueuedJob,
    SubmitRefused,
)
from cluster.reasons import pending_reason, submit_error, submit_refusal_code
from cluster.slurm import cli

_GPU_TRES = re.compile(r"gres/gpu=(\d+)")
_BILLING_TRES = re.compile(r"(?:^|,)billing=(\d+)")


def _controller_enforces(account: str, *, blocked: bool, timeout_s: float = 30) -> None:
    """Wait until slurmctld's own copies of the account's associations, its own and each of
    its users' (against which a job is judged), say MaxSubmitJobs=0 (`blocked`) or no such
    limit; a SlurmError if they do not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = cli.assoc_mgr_records(account)
        if "" in records and all(
            ("MaxSubmitJobs=0(" in record) == blocked for record in records.values()
        ):
            return
        if time.monotonic() > deadline:
            state = "blocked" if blocked else "open"
            raise cli.SlurmError(
                ["scontrol", "show", "assoc_mgr"], 1,
                f"slurmctld does not show account {account} and its users {state} after "
                f"{timeout_s:.0f} s",
            )  # fmt: skip
        time.sleep(0.1)


def _add_unless_there(*what: str) -> None:
    """`sacctmgr add`, where what another process added between our look and our add (two
    workers ensuring the organizers' one serving account) is no error: sacctmgr then says
    "Nothing new added." and exits 1."""
    try:
        cli.sacctmgr("add", *what)
    except cli.SlurmError as error:
        if "Nothing new added" not in error.stderr:
            raise


class SlurmBackend(ClusterBackend):
    name = "slurm"

    def __init__(self, *, partition: str, parent_account: str) -> None:
        self.partition = partition
        self.parent_account = parent_account

    # --- accounts ------------------------------------------------------------------------
    def account_apply(self, *, account: str, unix_user: str, limits: AccountLimits) -> None:
        if not cli.sacctmgr_rows("account", ["account"], f"name={account}"):
            _add_unless_there(
                "account", account, f"parent={self.parent_account}", f"Description={account}"
            )
        if not cli.sacctmgr_rows("assoc", ["user"], f"account={account}", f"user={unix_user}"):
            _add_unless_there("user", unix_user, f"account={account}")
        qos = [PLATFORM_QOS] if limits.platform else [NORMAL_QOS, PREEMPTIBLE_QOS]
        for entity, where in (("account", []), ("user", [f"name={unix_user}"])):
            names = [f"name={account}"] if entity == "account" else [f"account={account}"]
            cli.sacctmgr(
                "modify", entity, "where", *where, *names, "set",
                f"QOS={','.join(qos)}", f"DefaultQOS={qos[0]}",
            )  # fmt: skip
        # The budget is in billing units, GPU-equivalents (infra/slurm/setup.sh weighs CPUs
        # and memory by the node's share per GPU): a job that holds a node's CPUs or memory
        # without its GPUs pays for the GPUs it strands. gres/gpu=-1 lifts the GPU-only
        # budget of accounts made before.
        minutes = round(limits.gpu_hours * 60)
        account_limits = [f"GrpTRESMins=billing={minutes},gres/gpu=-1"]
        if limits.platform:
            # The organizers' accounts share the `platform` QOS, whose limits are the site's
            # (infra/slurm/setup.sh): their GPUs at once are capped on their own association.
            account_limits.append(f"GrpTRES=gres/gpu={limits.max_gpus}")
        else:
            account_limits.append(f"GrpSubmitJobs={MAX_QUEUED_JOBS}")
        cli.sacctmgr("modify", "account", "where", f"name={account}", "set", *account_limits)
        if limits.platform:
            return
        # An agent's GPUs, CPUs and memory at once and its time per job live on the agents'
        # QOS, per account: the same for every agent. CPUs and memory are capped in
        # proportion to GPUs (a node's share per GPU), so jobs that ask for CPUs or memory
        # without GPUs cannot fill the nodes and strand other agents' GPUs.
        wall = f"{limits.max_job_hours}:00:00"
        share = self._per_gpu_share()
        for name, gpus in ((NORMAL_QOS, limits.max_gpus),
                           (PREEMPTIBLE_QOS, limits.max_preemptible_gpus)):  # fmt: skip
            cli.sacctmgr("modify", "qos", "where", f"name={name}", "set",
                         f"MaxTRESPerAccount={_tres(gpus, share)}", f"MaxWall={wall}")  # fmt: skip

    def tres_for_gpus(self, gpus: int) -> str:
        """`cpu=..,mem=..,gres/gpu=N`: N GPUs with the CPUs and memory (MB) that go with them
        on the smallest GPU node."""
        return _tres(gpus, self._per_gpu_share())

    def _per_gpu_share(self) -> tuple[int, int] | None:
        """(CPUs, MB of memory) per GPU on the GPU node with the least of each."""
        shares = [
            (n.cpus // n.gpus_total, n.memory_mb // n.gpus_total)
            for n in self._node_records()
            if n.gpus_total
        ]
        if not shares:
            return None
        return min(c for c, _ in shares), min(m for _, m in shares)

    def account_block(self, *, account: str, blocked: bool) -> None:
        """No new jobs for the account (running ones go on), or new jobs again. It returns once
        the controller enforces it: slurmdbd passes the change on to slurmctld a moment later,
        and a closed account must not get a job in through that moment."""
        cli.sacctmgr(
            "modify",
            "account",
            "where",
            f"name={account}",
            "set",
            f"MaxSubmitJobs={0 if blocked else -1}",
        )
        _controller_enforces(account, blocked=blocked)

    def usage_reset(self, *, account: str) -> None:
        cli.sacctmgr("modify", "account", "where", f"name={account}", "set", "RawUsage=0")

    # --- jobs ----------------------------------------------------------------------------
    def submit(self, *, account: str, unix_user: str, request: JobRequest) -> str:
        stdout = request.workdir / "slurm-%j.out"
        command = [
            "sbatch", "--parsable",
            f"--job-name={request.name}",
            f"--account={account}",
            f"--qos={request.qos}",
            f"--partition={self.partition}",
            f"--nodes={request.nodes}",
            f"--gres=gpu:{request.gpus_per_node}",
            f"--time={request.time_limit_minutes}",
            f"--chdir={request.workdir}",
            f"--output={stdout}",
            "--requeue",
        ]  # fmt: skip
        try:
            # sbatch exports the environment it sees to the job: an agent's job gets a plain
            # login environment and its own variables, never the platform's (database URL,
            # secrets).
            result = cli.run(
                command,
                user=unix_user,
                input_text=with_env(request.script, request.env),
                cwd=str(request.workdir),
                env=login_environment(unix_user),
                clean_env=True,
            )
        except cli.SlurmError as refused:
            raise SubmitRefused(
                submit_error(refused.stderr),
                detail=refused.stderr,
                code=submit_refusal_code(refused.stderr),
            ) from None
        return result.stdout.strip().split(";")[0]

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
        if unix_user != pwd.getpwuid(os.getuid()).pw_name:
            # submitit submits as the calling process's user and pickles through its folder.
            raise SubmitRefused(
                "Python callables run as the platform's own user; submit a script to run as "
                f"{unix_user}"
            )
        executor = submitit.SlurmExecutor(
            folder=request.workdir / "submitit", python=sys.executable
        )
        executor.update_parameters(
            job_name=request.name,
            account=account,
            qos=request.qos,
            partition=self.partition,
            nodes=request.nodes,
            ntasks_per_node=1,
            gres=f"gpu:{request.gpus_per_node}",
            time=request.time_limit_minutes,
            additional_parameters={"requeue": True},
            setup=[
                f"export {key}={shlex.quote(value)}" for key, value in sorted(request.env.items())
            ],
        )
        try:
            job = executor.submit(function, *args, **kwargs)
        except submitit.core.utils.FailedJobError as refused:
            raise SubmitRefused(
                submit_error(str(refused)),
                detail=str(refused),
                code=submit_refusal_code(str(refused)),
            ) from None
        return str(job.job_id)

    def callable_result(self, *, scheduler_id: str, workdir: Path) -> Any:
        return submitit.SlurmJob(folder=workdir / "submitit", job_id=scheduler_id).result()

    def cancel_all(self, *, account: str) -> None:
        cli.run(["scancel", f"--account={account}"])

    def cancel(self, *, scheduler_id: str, unix_user: str) -> None:
        cli.run(["scancel", scheduler_id], user=unix_user)

    def accounting(self, *, accounts: list[str], since: datetime) -> list[AccountingRow]:
        if not accounts:
            return []
        # Only fields Slurm writes go through `sacct -P`; the agent's own text (the job's name
        # and folder, which may hold `|` and newlines) comes from `sacct --json` afterwards,
        # so every job in the first answer is in the second.
        fields = [
            "JobIDRaw", "Account", "QOS", "State", "Reason", "NNodes", "AllocTRES", "ReqTRES",
            "TimelimitRaw", "Submit", "Start", "End", "ElapsedRaw", "ExitCode",
        ]  # fmt: skip
        which = [
            "-X",
            "-D",
            "-a",
            "-A",
            ",".join(accounts),
            "-S",
            since.strftime("%Y-%m-%dT%H:%M:%S"),
        ]
        rows = cli.sacct_rows(fields, *which)
        texts = cli.sacct_job_texts(*which)
        records = []
        for row in rows:
            tres = _GPU_TRES.search(row["AllocTRES"]) or _GPU_TRES.search(row["ReqTRES"])
            billing = _BILLING_TRES.search(row["AllocTRES"])
            text = texts.get(row["JobIDRaw"], cli.JobText(name="", workdir=""))
            records.append(
                AccountingRow(
                    scheduler_id=row["JobIDRaw"],
                    name=text.name,
                    account=row["Account"],
                    qos=row["QOS"],
                    state=row["State"].split()[0],  # "CANCELLED by 0" -> "CANCELLED"
                    reason_code=row["Reason"],
                    nodes=int(row["NNodes"] or 0),
                    gpus=int(tres.group(1)) if tres else 0,
                    gpu_equivalents=int(billing.group(1)) if billing else None,
                    time_limit_minutes=int(row["TimelimitRaw"])
                    if row["TimelimitRaw"].isdigit()
                    else 0,
                    workdir=text.workdir,
                    submitted_at=_time(row["Submit"]),
                    started_at=_time(row["Start"]),
                    ended_at=_time(row["End"]),
                    elapsed_seconds=int(row["ElapsedRaw"] or 0),
                    exit_code=row["ExitCode"],
                )
            )
        # sacct learns a pending job's reason late; the controller knows it now.
        live = cli.squeue_rows(
            {"id": "%i", "state": "%T", "reason": "%r"}, "-A", ",".join(accounts)
        )
        reasons = {row["id"]: row["reason"] for row in live if row["state"] == "PENDING"}
        return [
            replace(r, state="PENDING", reason_code=reasons[r.scheduler_id])
            if r.scheduler_id in reasons and r.started_at is None
            else r
            for r in records
        ]

    # --- the cluster now -------------------------------------------------------------------
    def nodes(self) -> list[NodeState]:
        return [
            NodeState(n.name, n.state, n.gpus_total, n.gpus_allocated) for n in self._node_records()
        ]

    def _node_records(self) -> list[_Node]:
        nodes = []
        for record in cli.scontrol_records("node"):
            total = _GPU_TRES.search(record.get("CfgTRES", ""))
            allocated = _GPU_TRES.search(record.get("AllocTRES", ""))
            nodes.append(
                _Node(
                    name=record["NodeName"],
                    state=record.get("State", "").lower(),
                    cpus=int(record.get("CPUTot") or 0),
                    memory_mb=int(record.get("RealMemory") or 0),
                    gpus_total=int(total.group(1)) if total else 0,
                    gpus_allocated=int(allocated.group(1)) if allocated else 0,
                )
            )
        return nodes

    def queue(self) -> list[QueuedJob]:
        # `squeue -O field:|`: each field unpadded, followed by `|`. `tres-alloc` holds what a
        # running job was given and a pending one asks for, GPUs in total however they were
        # asked (--gres per node, --gpus per job). Every field here is Slurm's own; the names,
        # which may hold `|` and newlines, come from `squeue --json` afterwards.
        fields = [
            "JobID", "Account", "UserName", "State", "QOS", "NodeList", "tres-alloc", "Reason",
            "TimeUsed", "TimeLimit",
        ]  # fmt: skip
        text = cli.run(["squeue", "-h", "-O", ",".join(f"{f}:|" for f in fields)]).stdout
        rows = cli.parsable_rows(
            "\n".join(line.removesuffix("|") for line in text.splitlines()), fields
        )
        names = cli.squeue_job_names()
        jobs = []
        for row in rows:
            gpus = _GPU_TRES.search(row["tres-alloc"])
            pending = row["State"] == "PENDING"
            jobs.append(
                QueuedJob(
                    scheduler_id=row["JobID"],
                    account=row["Account"],
                    user=row["UserName"],
                    name=names.get(row["JobID"], ""),
                    state=row["State"],
                    qos=row["QOS"],
                    gpus=int(gpus.group(1)) if gpus else 0,
                    node_list="" if pending else row["NodeList"],
                    reason=pending_reason(row["Reason"]) if pending else "",
                    elapsed_seconds=duration_seconds(row["TimeUsed"]) or 0,
                    time_limit_minutes=(duration_seconds(row["TimeLimit"]) or 0) // 60,
                )
            )
        return jobs

    def charged_gpu_minutes(self, *, account: str) -> float:
        # RawUsage is exact, in billing-seconds: GPU-equivalent seconds (GPUs, or the CPUs
        # or memory of as many GPUs if that is more). assoc_mgr's GrpTRESMins billing usage
        # is the same number floored to whole minutes.
        rows = cli.parsable_rows(
            cli.run(["sshare", "-n", "-P", "-A", account, "-o", "Account,User,RawUsage"]).stdout,
            ["account", "user", "raw"],
        )
        for row in rows:
            if row["account"].strip() == account and not row["user"]:
                return float(row["raw"] or 0) / 60
        raise LookupError(f"Slurm has no association for account {account}")


@dataclass(frozen=True)
class _Node:
    name: str
    state: str
    cpus: int
    memory_mb: int
    gpus_total: int
    gpus_allocated: int


def _tres(gpus: int, share: tuple[int, int] | None) -> str:
    if share is None:
        return f"gres/gpu={gpus}"
    cpus, memory_mb = share
    return f"cpu={gpus * cpus},mem={gpus * memory_mb},gres/gpu={gpus}"


def duration_seconds(text: str) -> int | None:
    """Slurm's `[D-]HH:MM:SS`, `MM:SS` or `M` as seconds; None for UNLIMITED or anything else."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (days and not days.isdigit()):
        return None
    if len(parts) == 1:  # minutes alone
        return int(parts[0]) * 60 + int(days or 0) * 86400
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


def with_env(script: str, env: dict[str, str]) -> str:
    """Put `export` lines after the script's #SBATCH header (sbatch reads directives only up
    to the first command) so the job sees `env` however the scheduler exports."""
    if not env:
        return script
    lines = script.splitlines()
    if not lines or not lines[0].startswith("#!"):
        lines.insert(0, "#!/bin/bash")
    header_end = 1
    while header_end < len(lines) and (
        lines[header_end].startswith("#") or not lines[header_end].strip()
    ):
        header_end += 1
    exports = [f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())]
    return "\n".join([*lines[:header_end], *exports, *lines[header_end:]]) + "\n"


def _time(value: str) -> datetime | None:
    if not value or value in {"Unknown", "None"}:
        return None
    return timezone.make_aware(datetime.fromisoformat(value))
