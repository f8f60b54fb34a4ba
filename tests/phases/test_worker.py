"""`phases run`, the platform's worker: it makes every due transition on its own and stops
cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from arena.phases.models import PhaseTransition
from arena.phases.services import competition_plan
from cluster.backends.base import AccountLimits, JobRequest, SubmitRefused
from cluster.backends.local import LocalBackend
from cluster.services import account_ensure
from tests.conftest import ROOT, _database_url_for_subprocess

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_worker_moves_the_schedule_along_and_stops_on_sigterm(tmp_path):
    competition = competition_plan(
        name="worker", base_model="/models/base", instruct_model="",
        starts_at=timezone.now() - timedelta(hours=6),
        phase_lengths=[timedelta(hours=1), timedelta(hours=1)], arena_length=timedelta(hours=1),
    )  # fmt: skip
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "ARENA_VAR_DIR": str(tmp_path),
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "phases", "run", "--every", "0.5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while PhaseTransition.objects.filter(phase__competition=competition).count() < 8:
            assert worker.poll() is None, worker.communicate()[0]
            assert time.monotonic() < deadline, "the worker did not move the phases along"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=30)[0]
    assert worker.returncode == 0, output
    assert [p.state for p in competition.phases.order_by("number")] == ["closed", "closed"]
    assert "phase-2: -> closed" in output and "phase engine stopped" in output


def test_the_worker_measures_the_sandboxes_and_blocks_the_one_over_its_quota(tmp_path):
    # The worker's own scheduler: the local backend under its ARENA_VAR_DIR.
    backend = LocalBackend(log_dir=tmp_path / "local-jobs")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    account = account_ensure(
        name="agent_hoarder", unix_user="root", period="p", storage_gib=0, storage_path=sandbox,
        limits=AccountLimits(gpu_hours=1, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24),
        backend=backend,
    )  # fmt: skip
    (sandbox / "shard.bin").write_bytes(b"\1" * 10_000)  # over a quota of 0 GiB
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "ARENA_VAR_DIR": str(tmp_path),
        "CLUSTER_BACKEND": "local",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "phases", "run", "--every", "0.2", "--storage-every", "0.5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def wait_until(blocked: bool) -> None:
        deadline = time.monotonic() + 60
        while True:
            account.refresh_from_db()
            if bool(account.storage_blocked_reason) == blocked:
                return
            assert worker.poll() is None, worker.communicate()[0]
            assert time.monotonic() < deadline, f"the worker did not measure (blocked={blocked})"
            time.sleep(0.2)

    try:
        wait_until(blocked=True)
        with pytest.raises(SubmitRefused, match="may not submit"):  # the scheduler itself
            backend.submit(
                account="agent_hoarder", unix_user="root",
                request=JobRequest(name="j", script="true", nodes=1, gpus_per_node=0,
                                   time_limit_minutes=1, preemptible=False, workdir=sandbox),
            )  # fmt: skip
        (sandbox / "shard.bin").unlink()
        wait_until(blocked=False)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=30)[0]
    assert worker.returncode == 0, output
    assert "storage agent_hoarder: the sandbox uses" in output
    assert "storage agent_hoarder: back under the storage quota" in output
