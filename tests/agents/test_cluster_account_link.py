"""An agent's link to its Slurm account is the account row itself: migration 0009 links the
agents stored with the account's name, an account an agent holds cannot be deleted, and the
agent's jobs are found through the link, never by a name."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import ProtectedError

from agents.models import Agent
from agents.selectors import agent_job
from cluster.models import ClusterAccount, Job
from tests import factories

BEFORE = [("agents", "0008_scaffold_budget"), ("cluster", "0002_account_platform_storage")]
AFTER = [("agents", "0009_agent_cluster_account_link")]


@pytest.fixture
def migrated_back():
    """The database as it was before 0009, put forward again to the newest state afterwards."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield executor.loader.project_state(BEFORE).apps
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def old_account(apps, name: str):
    return apps.get_model("cluster", "ClusterAccount").objects.create(
        name=name, unix_user=name, period="phase-1", gpu_hours_limit=Decimal(10), max_gpus=1,
        max_preemptible_gpus=1, max_job_hours=1, storage_gib_limit=1,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_agents_stored_with_an_account_name_are_linked_to_that_account(migrated_back):
    old_agent = migrated_back.get_model("agents", "Agent")
    ann_account = old_account(migrated_back, "agent_ann")
    old_account(migrated_back, "agent_ben")  # nobody's
    old_agent.objects.create(name="ann", cluster_account="agent_ann")
    old_agent.objects.create(name="judge", cluster_account="")  # a judge agent has none
    old_agent.objects.create(name="ghost", cluster_account="agent_ghost")  # no such row

    MigrationExecutor(connection).migrate(AFTER)

    linked = dict(Agent.objects.values_list("name", "cluster_account_id"))
    assert linked == {"ann": ann_account.pk, "judge": None, "ghost": None}


@pytest.mark.django_db(transaction=True)
def test_going_back_stores_the_account_name_again(migrated_back):
    MigrationExecutor(connection).migrate(AFTER)
    factories.agent_with_gpu_hours("cy", {"phase-1": 0.0})  # its account is acct_cy
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old_agent = executor.loader.project_state(BEFORE).apps.get_model("agents", "Agent")
    assert old_agent.objects.get(name="cy").cluster_account == "acct_cy"


@pytest.mark.django_db
def test_an_account_an_agent_holds_cannot_be_deleted():
    agent = factories.agent_with_gpu_hours("dee", {"phase-1": 1.0})
    with pytest.raises(ProtectedError):
        ClusterAccount.objects.filter(pk=agent.cluster_account_id).delete()
    assert ClusterAccount.objects.filter(pk=agent.cluster_account_id).exists()


@pytest.mark.django_db
def test_an_agents_job_is_found_through_its_own_account_only():
    ann = factories.agent_with_gpu_hours("ann", {"phase-1": 0.0})
    ben = factories.agent_with_gpu_hours("ben", {"phase-1": 0.0})
    job = Job.objects.create(
        account=ann.cluster_account, backend="local", scheduler_id="17", name="train",
        qos="normal", nodes=1, gpus=1, time_limit_minutes=5, workdir="/tmp", script="true",
        stdout_path="/tmp/out",
    )  # fmt: skip
    judge = Agent.objects.create(name="judge")  # no account: no jobs
    assert agent_job(ann, "17") == job
    assert agent_job(ben, "17") is None and agent_job(judge, "17") is None
