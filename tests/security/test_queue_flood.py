"""An agent cannot fill the cluster's queue: Slurm holds at most MaxJobCount (10,000) jobs for
everyone, so an agent's held jobs would lock out the other agents and the platform's own serving
and evaluation jobs. Each agent's account may have MAX_QUEUED_JOBS queued at once (GrpSubmitJobs on its
association), refused at submit beyond that, while a closed account stays closed; the attack is played with plain sbatch
as the agent's Unix user."""

from __future__ import annotations

import pytest

from cluster.backends.base import MAX_QUEUED_JOBS
from cluster.reasons import submit_error
from cluster.slurm import cli
from tests.cluster.conftest import make_agent  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_agent_cannot_hold_more_than_its_share_of_the_queue(
    make_agent,  # noqa: F811 - the fixture imported above
):
    flooder = make_agent("flooder")
    other = make_agent("bystander")

    def held(agent) -> cli.Result:
        return cli.run(
            ["sbatch", "--parsable", "--hold", f"--account={agent.account.name}", "--gres=gpu:0",
             "--time=1", "--wrap=true"],
            user=agent.user, cwd=str(agent.sandbox), check=False,
        )  # fmt: skip

    accepted = [held(flooder) for _ in range(MAX_QUEUED_JOBS)]
    assert all(r.stdout.strip() for r in accepted), [r.stderr for r in accepted if not r.stdout][:3]
    refused = held(flooder)
    assert not refused.stdout.strip()
    assert submit_error(refused.stderr).startswith("the account already has the most jobs")
    # Someone else can still queue a job.
    assert held(other).stdout.strip()
