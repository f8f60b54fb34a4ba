"""The cluster now, read from the real Slurm cluster: GPUs per node and the queue."""

from __future__ import annotations

import pytest

from cluster.backends.base import JobRequest
from cluster.services import job_submit
from tests.cluster.conftest import queued_with_reason, wait_for_state

pytestmark = pytest.mark.slow


def test_a_running_job_shows_on_its_node_and_in_the_queue(make_agent, slurm):
    agent = make_agent("state")

    def submit(name: str, gpus: int):
        request = JobRequest(
            name=name, script="#!/bin/bash\nsleep 60\n", nodes=1, gpus_per_node=gpus,
            time_limit_minutes=5, preemptible=False, workdir=agent.sandbox,
        )  # fmt: skip
        return job_submit(account=agent.account, request=request, backend=slurm)

    running = submit("three-gpus", 3)
    wait_for_state(running, {"RUNNING"}, backend=slurm)
    waiting = submit("six-more", 6)  # 3 + 6 > 8 GPUs at once on the normal QOS
    queued_with_reason(slurm, waiting.scheduler_id)

    queue = {job.scheduler_id: job for job in slurm.queue()}
    mine = queue[running.scheduler_id]
    assert (mine.account, mine.user, mine.name, mine.state, mine.qos, mine.gpus) == (
        agent.account.name, agent.user, "three-gpus", "RUNNING", "normal", 3,
    )  # fmt: skip
    assert mine.time_limit_minutes == 5 and 0 <= mine.elapsed_seconds < 120
    assert mine.reason == ""
    held = queue[waiting.scheduler_id]
    assert (held.state, held.gpus, held.node_list) == ("PENDING", 6, "")
    assert held.reason.startswith("the account already uses its maximum number of GPUs at once")

    nodes = {node.name: node for node in slurm.nodes()}
    assert sorted(nodes) == [f"n{k}" for k in range(1, 9)]
    assert all(node.gpus_total == 8 for node in nodes.values())
    assert nodes[mine.node_list].gpus_allocated >= 3  # others' jobs may share the node
    assert nodes[mine.node_list].state in {"mixed", "allocated"}
