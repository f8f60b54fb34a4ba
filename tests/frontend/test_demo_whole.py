"""`manage.py demo --exit`, whole, as a new user runs it: four agents train on the local cluster,
nominate, are served and battle, phase 2 trains on their votes, everything is evaluated and
audited, and the demo gives its verdict from its own checks and exits by it. Then `security
check` is clean on what it left running.

It runs on the production defaults a new user gets, the sandboxes quota images (`loop_image`)
included, not the plain folders the rest of the suite uses. It runs alone (serial), in its own
process on an SQLite database, a var/ and ports of its own. Beside the parallel run it took
twice as long and starved the other tests of the CPU (its four agents train on it): model
probes and pages timed out.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import pytest
from django.conf import settings

from tests.conftest import ROOT, TEST_MODELS_DIR

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# About 10 minutes alone on two cores.
WHOLE_DEMO_S = 2400
SECURITY_CHECK_S = 300
# What the suite sets for itself and a new user does not have: the demo's embedded Redis-less
# channel layer, and the production sandbox storage (tests/conftest.py makes it plain folders).
SUITE_ONLY = {"REDIS_URL", "AGENTS_SANDBOX_STORAGE"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_whole_demo_passes_every_check_and_exits_zero(tiny_models, tmp_path):
    if not settings.AGENTS_TRAIN_PYTHON.is_file():
        pytest.fail(
            f"no training environment at {settings.AGENTS_TRAIN_PYTHON} (make test builds it)"
        )
    env = {
        **{k: v for k, v in os.environ.items() if k not in SUITE_ONLY},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'arena.sqlite3'}",
        "ARENA_VAR_DIR": str(tmp_path / "var"),
        "ARENA_MODELS_DIR": str(TEST_MODELS_DIR),
        "AGENTS_GATEWAY_PORT": str(_free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--exit", "--votes", "40",
             "--port", str(_free_port())],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            demo.wait(timeout=WHOLE_DEMO_S)
        except subprocess.TimeoutExpired:
            demo.send_signal(signal.SIGTERM)  # the demo ends what it started, and says so
            try:
                demo.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
    text = log.read_text(errors="replace")
    tail = text[-6000:]
    verdict = re.search(r"the demo worked: (\d+) checks passed, none failed", text)
    assert demo.returncode == 0 and verdict, tail
    assert int(verdict.group(1)) >= 20, tail
    assert "  FAIL  " not in text and "did not work" not in text, tail

    # How the demo's setup stands against the trust boundaries, on its database: its agents'
    # sandboxes on their quota volumes, the firewall, the model servers' keys...
    check = subprocess.run(
        [sys.executable, "manage.py", "security", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=SECURITY_CHECK_S,
    )  # fmt: skip
    report = check.stdout + check.stderr
    assert check.returncode == 0, report
    assert "PROBLEM" not in report and "sandboxes held to their quota" in report, report
