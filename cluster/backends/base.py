from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

NORMAL_QOS = "normal"
PREEMPTIBLE_QOS = "preemptible"
# The organizers' own jobs (evaluation, serving): a QOS of their own, so that applying their
# limits never touches the limits agents share on `normal` and `preemptible`.
PLATFORM_QOS = "platform"


@dataclass(frozen=True)
class AccountLimits:
    gpu_hours: float
    max_gpus: int
    max_preemptible_gpus: int
    max_job_hours: int
    # An organizers' account: its jobs run on the `platform` QOS, its GPUs at once are capped
    # on the account itself, and it has no preemptible GPUs.
    platform: bool = False


# Jobs an agent's account may have queued (pending or running) at once. Slurm's controller holds
# at most MaxJobCount jobs for everyone, and one agent's held jobs must not fill it and lock out
# the other agents and the platform's own serving and evaluation jobs.
MAX_QUEUED_JOBS = 200


@dataclass(frozen=True)
class JobRequest:
    name: str
    script: str  # a bash script; #SBATCH lines in it are overridden by the fields below
    nodes: int
    gpus_per_node: int
    time_limit_minutes: int
    preemptible: bool
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    platform: bool = False  # set by the services from the account, not by callers

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def qos(self) -> str:
        if self.platform:
            return PLATFORM_QOS
        return PREEMPTIBLE_QOS if self.preemptible else NORMAL_QOS


@dataclass(frozen=True)
class AccountingRow:
    """One run (segment) of a job as the scheduler recorded it. A job that was requeued has
    one row per run; a job that never started has one row without a start."""

    scheduler_id: str
    name: str
    account: str
    qos: str
    state: str  # Slurm's state names: PENDING, RUNNING, COMPLETED, PREEMPTED, REQUEUED, ...
    reason_code: str  # Slurm's pending reason code; "" or "None" when none
    nodes: int
    gpus: int
    time_limit_minutes: int
    workdir: str
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    elapsed_seconds: int
    exit_code: str
    # What one second of the run costs the budget, in GPUs: more than `gpus` when it holds
    # more of a node's CPUs or memory than its GPUs come with. None: its GPUs.
    gpu_equivalents: int | None = None


@dataclass(frozen=True)
class NodeState:
    """One node as the scheduler sees it now."""

    name: str
    state: str  # the scheduler's words: idle, mixed, allocated, down, drained, ...
    gpus_total: int  # 0: no fixed capacity (the local backend)
    gpus_allocated: int


@dataclass(frozen=True)
class QueuedJob:
    """A pending or running job, whoever submitted it."""

    scheduler_id: str
    account: str
    user: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, ...
    qos: str
    gpus: int  # in total, over all its nodes
    node_list: str  # where it runs ("" while pending)
    reason: str  # why it waits, in words ("" when it runs)
    elapsed_seconds: int
    time_limit_minutes: int


class SubmitRefused(Exception):
    """The scheduler refused a job; `message` says why in words a user understands, `code`
    what kind of refusal it is: "over_budget" (the GPU-hours left) or "refused" (the rest)."""

    def __init__(self, message: str, *, detail: str = "", code: str = "refused") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail  # the scheduler's own words, for logs
        self.code = code


class ClusterBackend(ABC):
    name: str

    @abstractmethod
    def account_apply(self, *, account: str, unix_user: str, limits: AccountLimits) -> None:
        """Create the account (if new) and set its limits in the scheduler."""

    @abstractmethod
    def account_block(self, *, account: str, blocked: bool) -> None:
        """Stop (or resume) accepting new jobs under the account."""

    @abstractmethod
    def usage_reset(self, *, account: str) -> None:
        """Start a new budget period: GPU time used so far no longer counts against the limit."""

    @abstractmethod
    def submit(self, *, account: str, unix_user: str, request: JobRequest) -> str:
        """Submit as `unix_user`; return the scheduler's job id or raise SubmitRefused."""

    @abstractmethod
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
        """Run `function(*args, **kwargs)` as a job (`request.script` is not used); return its id."""

    @abstractmethod
    def callable_result(self, *, scheduler_id: str, workdir: Path) -> Any:
        """The finished callable's return value; raises its exception if it failed."""

    @abstractmethod
    def cancel(self, *, scheduler_id: str, unix_user: str) -> None: ...

    @abstractmethod
    def cancel_all(self, *, account: str) -> None:
        """Cancel every pending and running job of the account, however it was submitted."""

    @abstractmethod
    def accounting(self, *, accounts: list[str], since: datetime) -> list[AccountingRow]:
        """Every job of these accounts submitted since `since`, however it was submitted,
        one row per run, oldest first."""

    @abstractmethod
    def charged_gpu_minutes(self, *, account: str) -> float:
        """GPU-minutes the scheduler itself has charged the account (its budget usage)."""

    @abstractmethod
    def nodes(self) -> list[NodeState]:
        """Every node, with its GPUs in total and allocated now."""

    @abstractmethod
    def queue(self) -> list[QueuedJob]:
        """Every pending and running job on the cluster, in the scheduler's order."""
