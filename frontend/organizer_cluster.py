"""The cluster as it is now, for the organizer's cluster page: GPUs in use per node, the queue, and
each account's GPUs in use per QOS. Read live from the scheduler (`nodes()`, `queue()`); if it
does not answer, the page says so instead of failing."""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from agents.selectors import agent_names_by_account
from cluster.backends import cluster_backend
from cluster.backends.base import ClusterBackend, QueuedJob
from cluster.slurm.cli import SlurmError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeLine:
    name: str
    state: str
    gpus_allocated: int
    gpus_total: int  # 0: no fixed capacity

    @property
    def fraction(self) -> float:
        if self.gpus_total <= 0:
            return 1.0 if self.gpus_allocated else 0.0
        return min(1.0, self.gpus_allocated / self.gpus_total)


@dataclass(frozen=True)
class QueueLine:
    job: QueuedJob
    owner: str  # the agent's name, or the account for the organizers' and others' jobs
    elapsed: str
    time_limit: str


@dataclass(frozen=True)
class ClusterNow:
    backend: str
    nodes: list[NodeLine] = field(default_factory=list)
    queue: list[QueueLine] = field(default_factory=list)
    # GPUs of running jobs per (account, QOS)
    gpus_in_use: Counter[tuple[str, str]] = field(default_factory=Counter)
    error: str = ""  # the scheduler did not answer: why

    @property
    def gpus_allocated(self) -> int:
        return sum(n.gpus_allocated for n in self.nodes)

    @property
    def gpus_total(self) -> int:
        return sum(n.gpus_total for n in self.nodes)


def cluster_now(*, backend: ClusterBackend | None = None) -> ClusterNow:
    backend = backend or cluster_backend()
    try:
        nodes, queue = backend.nodes(), backend.queue()
    except (SlurmError, OSError, subprocess.TimeoutExpired) as failed:
        log.warning("the cluster's state could not be read: %s", failed)
        return ClusterNow(backend=backend.name, error=str(failed))
    owners = agent_names_by_account()
    in_use: Counter[tuple[str, str]] = Counter()
    for job in queue:
        if job.state == "RUNNING":
            in_use[(job.account, job.qos)] += job.gpus
    return ClusterNow(
        backend=backend.name,
        nodes=[NodeLine(n.name, n.state, n.gpus_allocated, n.gpus_total) for n in nodes],
        queue=[
            QueueLine(
                job=job,
                owner=owners.get(job.account, job.account),
                elapsed=_clock(job.elapsed_seconds),
                time_limit=_clock(job.time_limit_minutes * 60),
            )
            for job in queue
        ],
        gpus_in_use=in_use,
    )


def _clock(seconds: int) -> str:
    """Slurm's way of writing a duration: `D-HH:MM:SS`, or `H:MM:SS`."""
    days, rest = divmod(int(seconds), 86400)
    clock = str(dt.timedelta(seconds=rest))
    return f"{days}-{clock.zfill(8)}" if days else clock
