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
