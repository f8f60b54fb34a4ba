"""The cluster's page (/organizer/cluster/): nodes and the queue as the scheduler says now,
GPUs per account, and the jobs, narrowed to one agent with `?agent=`."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.backends.base import AccountLimits, JobRequest
from cluster.models import ClusterAccount
from cluster.services import job_submit
from tests import factories
from tests.organizer import builders
from tests.organizer.pages import PAGES, assert_nav, assert_staff_only

pytestmark = pytest.mark.django_db

URL = "/organizer/cluster/"


@pytest.fixture
def busy_cluster(page_cluster, tmp_path):
    factories.running_phase(label="phase-1")
    ann, ben = builders.agent("ann"), builders.agent("ben")
    builders.job(ann, submitted=timezone.now(), name="ann-sft")
    builders.job(ben, submitted=timezone.now(), state="RUNNING", name="ben-dpo")
    # The local cluster runs a job as its account's Unix user, which must exist: root here.
    ClusterAccount.objects.filter(name="acct_ann").update(unix_user="root")
    page_cluster.account_apply(
        account="acct_ann", unix_user="root", limits=AccountLimits(100, 8, 8, 24)
    )
    request = JobRequest(
        name="ann-live", script="sleep 60", nodes=1, gpus_per_node=2, time_limit_minutes=10, preemptible=False,
        workdir=tmp_path,
    )  # fmt: skip
    job_submit(account=ClusterAccount.objects.get(name="acct_ann"), request=request, backend=page_cluster)  # fmt: skip
    yield
    page_cluster.cancel_all(account="acct_ann")


def test_only_staff_see_it():
    assert_staff_only(URL)


def test_it_shows_nodes_the_queue_gpus_per_account_and_the_jobs(organizer_staff, busy_cluster):
    page = organizer_staff.get(URL).content.decode()

    assert 'id="node-localhost"' in page and "2 GPUs (no fixed capacity)" in page
    assert "ann-live" in page  # in the queue, running
    assert 'id="account-ann"' in page and "2 / 8 GPUs (25%)" in page
    assert "ann-sft" in page and "ben-dpo" in page


def test_the_jobs_narrow_to_one_agent(organizer_staff, busy_cluster):
    page = organizer_staff.get(URL + "?agent=ben").content.decode()

    assert "ben-dpo" in page and "ann-sft" not in page
    assert '<option value="ben" selected>' in page


def test_it_carries_no_other_pages_sections(organizer_staff, busy_cluster):
    page = organizer_staff.get(URL).content.decode()

    assert 'id="timeline"' not in page and "Nominations" not in page
    assert "API credit" not in page and "Storage" not in page  # the agents' budgets
    assert "Audit findings" not in page and "Benchmark scores" not in page


def test_the_nav_marks_it_and_every_link_answers(organizer_staff, busy_cluster):
    page = organizer_staff.get(URL).content.decode()
    assert_nav(organizer_staff, page, current=[PAGES["Cluster"]])
