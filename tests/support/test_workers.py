"""Each pytest-xdist worker runs in its own namespace on the shared machine, and `make test`
reports where the suite's time went (tests/support/workers.py, tests/support/timing.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from agents.services import agent_unix_user
from tests.support import workers
from tests.support.timing import durations_read, file_durations, files_longest_first, report

ROOT = Path(__file__).resolve().parents[2]


def test_this_process_runs_in_its_workers_namespace():
    assert workers.unix_user_prefix() == settings.AGENTS_UNIX_USER_PREFIX
    assert agent_unix_user("alice") == workers.agent_user("alice")
    if workers.WORKER_TAG:
        tag = workers.WORKER_TAG
        assert agent_unix_user("alice") == f"agent_{tag}_alice"
        assert str(settings.AGENTS_SANDBOX_ROOT).endswith(f"-{tag}")
        assert f"rsi-arena-{tag}" == settings.AGENTS_RUNS_CGROUP_ROOT
        assert workers.worker_path("/tmp/arena-x") == Path(f"/tmp/arena-x-{tag}")
    else:
        assert agent_unix_user("alice") == "agent_alice"
        assert workers.worker_path("/tmp/arena-x") == Path("/tmp/arena-x")


def test_each_worker_gets_its_own_redis_database_after_the_suites():
    assert workers._redis_url_for_worker("redis://127.0.0.1:6379/1", 0) == (
        "redis://127.0.0.1:6379/2"
    )
    assert workers._redis_url_for_worker("redis://127.0.0.1:6379/1", 3) == (
        "redis://127.0.0.1:6379/5"
    )
    with pytest.raises(RuntimeError, match="database 16"):
        workers._redis_url_for_worker("redis://127.0.0.1:6379/4", 11)
    with pytest.raises(RuntimeError, match="database index"):
        workers._redis_url_for_worker("redis://127.0.0.1:6379", 0)


def test_a_worker_namespaces_the_environment_before_the_settings_are_read(tmp_path):
    """What a worker's processes inherit: run the plugin as xdist starts a worker."""
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AGENTS_", "PYTEST_")) and k != "OMP_NUM_THREADS"
        },
        "PYTEST_XDIST_WORKER": "gw3",
        "REDIS_URL": "redis://127.0.0.1:6379/1",
    }
    script = (
        "import json, os, tests.support.workers; "
        "print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith('AGENTS_') or k in ('REDIS_URL', 'OMP_NUM_THREADS')}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    seen = json.loads(done.stdout)
    assert seen == {
        "REDIS_URL": "redis://127.0.0.1:6379/5",
        "OMP_NUM_THREADS": "1",
        "AGENTS_UNIX_USER_PREFIX": "agent_w3_",
        "AGENTS_RUNS_CGROUP_ROOT": "rsi-arena-w3",
        "AGENTS_SANDBOX_ROOT": "/srv/rsi-arena/sandboxes-w3",
        "AGENTS_RUNS_DIR": "/srv/rsi-arena/runs-w3",
        "AGENTS_SHARED_MODELS_DIR": "/srv/rsi-arena/models-w3",
        "AGENTS_NOMINEE_STORE": "/srv/rsi-arena/nominees-w3",
        "AGENTS_CHECKPOINT_PROBE_TIMEOUT_S": "600",
    }


def test_a_prefix_the_firewalls_setup_would_not_find_is_refused_at_start():
    env = {**os.environ, "AGENTS_UNIX_USER_PREFIX": "rival_"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "arena.settings"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "AGENTS_UNIX_USER_PREFIX='rival_'" in done.stderr


def test_the_timing_report_lists_the_slowest_tests_the_folders_and_both_runs_counts():
    rows = [
        {"test": "tests/a/test_x.py::test_slow", "seconds": 90.0, "outcome": "passed"},
        {"test": "tests/a/test_x.py::test_quick", "seconds": 1.5, "outcome": "failed"},
        {"test": "tests/b/test_y.py::test_mid", "seconds": 12.25, "outcome": "skipped"},
    ]
    text = report([json.dumps(row) for row in rows])
    lines = text.splitlines()
    slowest = lines[1 : 1 + 3]
    assert [line.split()[-1] for line in slowest] == [
        "tests/a/test_x.py::test_slow",
        "tests/b/test_y.py::test_mid",
        "tests/a/test_x.py::test_quick",
    ]
    assert "91.5 s  tests/a (2 tests)" in text
    assert "12.2 s  tests/b (1 tests)" in text
    assert lines[-1] == "tests: 1 passed, 1 failed, 1 skipped"
    assert report([]) == "[timing] no test durations were recorded"


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_files_known_to_take_longest_go_to_the_workers_first():
    items = [
        _Item(nodeid)
        for nodeid in [
            "tests/a.py::one", "tests/a.py::two", "tests/new.py::x", "tests/b.py::one",
            "tests/c.py::one", "tests/b.py::two",
        ]
    ]  # fmt: skip
    files_longest_first(items, {"tests/b.py": 300.0, "tests/c.py": 20.0, "tests/a.py": 5.0})
    assert [item.nodeid for item in items] == [
        "tests/b.py::one", "tests/b.py::two", "tests/c.py::one",
        "tests/a.py::one", "tests/a.py::two", "tests/new.py::x",
    ]  # fmt: skip


def test_durations_come_from_a_full_runs_timings_and_a_bad_file_means_no_order(tmp_path):
    rows = [
        {"test": "tests/a.py::one", "seconds": 2.0, "outcome": "passed"},
        {"test": "tests/b.py::one", "seconds": 9.0, "outcome": "passed"},
        {"test": "tests/a.py::two", "seconds": 3.0, "outcome": "failed"},
    ]
    assert file_durations([json.dumps(row) for row in rows]) == {
        "tests/b.py": 9.0,
        "tests/a.py": 5.0,
    }
    bad = tmp_path / "durations.json"
    bad.write_text("[1, 2")
    assert durations_read(bad) == {}
    assert durations_read(tmp_path / "missing.json") == {}
