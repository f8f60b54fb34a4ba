"""Accounts through the cluster's services: the organizers' own accounts share one setup, and
re-provisioning reopens an account the organizers closed but not one over its storage quota."""

import json
import os
import pwd

import pytest

from cluster.backends.base import AccountLimits
from cluster.backends.local import LocalBackend
from cluster.models import ClusterAccount
from cluster.services import account_close, account_ensure, platform_account_ensure

pytestmark = pytest.mark.django_db

LIMITS = AccountLimits(gpu_hours=10.0, max_gpus=2, max_preemptible_gpus=2, max_job_hours=4)


@pytest.fixture
def backend(tmp_path):
    return LocalBackend(log_dir=tmp_path / "scheduler")


def scheduler_view(backend: LocalBackend, name: str) -> dict:
    return json.loads((backend.root / "accounts" / f"{name}.json").read_text())


def test_the_organizers_accounts_differ_only_in_name_period_and_gpu_hours(backend):
    serving = platform_account_ensure(
        name="organizer_serving", period="phase-1", gpu_hours=10_000, backend=backend
    )
    evals = platform_account_ensure(
        name="organizer_evals", period="phase-2", gpu_hours=200, backend=backend
    )
    me = pwd.getpwuid(os.getuid()).pw_name
    for account, period, hours in ((serving, "phase-1", 10_000), (evals, "phase-2", 200)):
        stored = ClusterAccount.objects.get(pk=account.pk)
        assert (stored.unix_user, stored.period, stored.gpu_hours_limit) == (me, period, hours)
        assert stored.platform and stored.max_preemptible_gpus == 0
        assert (stored.max_gpus, stored.max_job_hours, stored.storage_gib_limit) == (8, 24, 100)
        # The scheduler has the same limits, under the organizers' own QOS.
        view = scheduler_view(backend, stored.name)
        assert view["platform"] and view["gpu_hours"] == hours and view["unix_user"] == me
        assert not view["blocked"]


def test_reprovisioning_reopens_a_closed_account_and_plain_updates_do_not(backend):
    account = account_ensure(
        name="agent_ann", unix_user="agent_ann", period="p", limits=LIMITS, storage_gib=1,
        backend=backend,
    )  # fmt: skip
    account_close(account=account, reason="the agent was deprovisioned", backend=backend)

    # New limits (a phase starting) leave the organizers' closing in force.
    again = account_ensure(
        name="agent_ann", unix_user="agent_ann", period="p", limits=LIMITS, storage_gib=2,
        backend=backend,
    )  # fmt: skip
    assert again.submissions_blocked_reason == "the agent was deprovisioned"
    assert scheduler_view(backend, "agent_ann")["blocked"]

    reopened = account_ensure(
        name="agent_ann", unix_user="agent_ann", period="p", limits=LIMITS, storage_gib=2,
        reopen=True, backend=backend,
    )  # fmt: skip
    assert reopened.blocked_reason == ""
    assert not scheduler_view(backend, "agent_ann")["blocked"]


def test_reopening_leaves_a_storage_block_in_force(backend):
    account = account_ensure(
        name="agent_ben", unix_user="agent_ben", period="p", limits=LIMITS, storage_gib=1,
        backend=backend,
    )  # fmt: skip
    ClusterAccount.objects.filter(pk=account.pk).update(
        submissions_blocked_reason="closed by the organizers",
        storage_blocked_reason="over the storage quota (2.0 of 1 GiB)",
    )
    reopened = account_ensure(
        name="agent_ben", unix_user="agent_ben", period="p", limits=LIMITS, storage_gib=1,
        reopen=True, backend=backend,
    )  # fmt: skip
    assert reopened.submissions_blocked_reason == ""
    assert reopened.blocked_reason == "over the storage quota (2.0 of 1 GiB)"
    assert scheduler_view(backend, "agent_ben")["blocked"]
