"""The suite refuses to run on the embedded defaults unless told to (see tests/conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "ARENA_TEST_EMBEDDED"}}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_env.py",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env={**base, "DATABASE_URL": f"sqlite:///{tmp_path / 'guard.sqlite3'}", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_suite_stops_on_sqlite_and_the_in_memory_layer(tmp_path):
    result = run_pytest(tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "not PostgreSQL (set DATABASE_URL)" in output
    assert "not channels_redis (set REDIS_URL)" in output


def test_the_embedded_defaults_run_when_asked_for(tmp_path):
    result = run_pytest(tmp_path, ARENA_TEST_EMBEDDED="1")
    assert result.returncode == 0, result.stdout + result.stderr
