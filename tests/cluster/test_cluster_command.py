"""`manage.py cluster storage`: every open agent account's sandbox measured, a line each."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from cluster.backends import cluster_backend
from cluster.backends.base import AccountLimits
from cluster.models import ClusterAccount
from cluster.services import account_close, account_ensure

pytestmark = pytest.mark.django_db

LIMITS = AccountLimits(gpu_hours=1.0, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)


@pytest.fixture
def backend(settings, tmp_path):
    settings.CLUSTER_BACKEND = "local"
    settings.VAR_DIR = tmp_path / "var"
    return cluster_backend()


def sandbox_account(name, tmp_path, backend, *, storage_gib):
    sandbox = tmp_path / name
    sandbox.mkdir()
    return account_ensure(
        name=name, unix_user="root", period="p", limits=LIMITS, storage_gib=storage_gib,
        storage_path=sandbox, backend=backend,
    ), sandbox  # fmt: skip


def storage() -> str:
    out = io.StringIO()
    call_command("cluster", "storage", stdout=out)
    return out.getvalue()


def test_storage_measures_each_open_agent_and_blocks_the_one_over_its_quota(backend, tmp_path):
    over, over_sandbox = sandbox_account("agent_over", tmp_path, backend, storage_gib=0)
    (over_sandbox / "data.jsonl").write_text("x" * 10_000)
    fine, _ = sandbox_account("agent_fine", tmp_path, backend, storage_gib=400)
    gone, gone_sandbox = sandbox_account("agent_gone", tmp_path, backend, storage_gib=0)
    (gone_sandbox / "kept-for-the-audit").write_text("x")
    account_close(account=gone, reason="the agent was deprovisioned", backend=backend)
    account_ensure(
        name="organizer_evals", unix_user="root", period="p", storage_gib=100, backend=backend,
        limits=AccountLimits(gpu_hours=1, max_gpus=8, max_preemptible_gpus=0, max_job_hours=24,
                             platform=True),
    )  # fmt: skip

    lines = storage().splitlines()

    assert [line.split()[0] for line in lines] == ["agent_fine", "agent_over"]
    assert "0.00 of 400 GiB  ok" in lines[0]
    assert "blocked: the sandbox uses 0.0 GiB, over the storage quota of 0 GiB" in lines[1]
    over.refresh_from_db()
    assert over.storage_measured_at is not None and over.storage_bytes_used >= 10_000
    assert over.blocked_reason.startswith("the sandbox uses")
    gone.refresh_from_db()
    assert gone.storage_measured_at is None  # closed: not measured
    assert ClusterAccount.objects.get(name="organizer_evals").storage_measured_at is None

    (over_sandbox / "data.jsonl").unlink()
    assert "ok" in storage().splitlines()[1]
    over.refresh_from_db()
    assert over.blocked_reason == ""
