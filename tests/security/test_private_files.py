"""Issue 12, item 10: the platform's own files are private to it.

An agent's Unix user tries to read what the platform keeps in var/ (the demo's database, the
secret key, eval logs with held-out items, agents' reports, the local cluster's job folders)
and to read upstream API keys straight from the database.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from agents.models import Upstream
from arena.private_files import private_secret
from tests.conftest import ROOT
from tests.security.conftest import Player

HELD_OUT = "held-out item 17: what is the capital of Atlantis? Poseidonia"
pytestmark = pytest.mark.django_db(transaction=True)  # the agent's psql sees committed rows

UPSTREAM_KEY = "sk-upstream-never-in-clear-3f9c2a"


def _legacy_var(root: Path) -> dict[str, Path]:
    """A var/ as the platform left it before: folders 0755, files 0644 (umask 022)."""
    var = root / "var"
    files = {
        "database": var / "arena.sqlite3",
        "secret key": var / "secret_key",
        "eval log": var / "evals" / "phase-1" / "run-1" / "logs" / "samples.jsonl",
        "report": var / "reports" / "2026-11-30" / "agent_rival.md",
        "job folder": var / "local-jobs" / "jobs" / "1" / "meta.json",
        "server log": var / "logs" / "serve-8100.log",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{UPSTREAM_KEY}\n{HELD_OUT}\n")
        path.chmod(0o644)
    for folder in {var, *(p for f in files.values() for p in f.parents if var in p.parents)}:
        folder.chmod(0o755)
    return files


def _platform_starts(var: Path) -> None:
    """One start of the platform on `var` (any process that loads the settings)."""
    env = {
        **os.environ,
        "ARENA_VAR_DIR": str(var),
        "DATABASE_URL": f"sqlite:///{var / 'arena.sqlite3'}",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_an_agent_reads_nothing_in_an_existing_var_once_the_platform_starts(
    players, exposed: Path
) -> None:
    eve: Player = players("sec_files_eve")
    files = _legacy_var(exposed)
    var = exposed / "var"
    _platform_starts(var)

    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    listing = eve.shell(f"ls {var}")
    assert listing.returncode != 0, f"the agent listed var/: {listing.stdout}"
    for what, path in files.items():
        read = eve.shell(f"cat {path}")
        assert read.returncode != 0 and HELD_OUT not in read.stdout, f"the agent read the {what}"
    # What the platform writes there later is out of reach too, whatever its own mode.
    later = var / "reports" / "2026-12-01" / "agent_rival.md"
    later.parent.mkdir(parents=True)
    later.write_text(HELD_OUT)
    later.chmod(0o644)
    assert HELD_OUT not in eve.shell(f"cat {later}").stdout


def test_an_agent_reads_nothing_in_the_running_platforms_var(players) -> None:
    eve: Player = players("sec_files_eve")
    var = Path(settings.VAR_DIR)
    assert eve.shell(f"ls {var}").returncode != 0, "the agent listed the platform's var/"
    for name in ["secret_key", "voter_salt", "field_encryption_key", "arena.sqlite3"]:
        read = eve.shell(f"cat {var / name}")
        assert read.returncode != 0, f"the agent read var/{name}"
    for name in ["secret_key", "voter_salt", "field_encryption_key"]:
        if (var / name).exists():  # none when the secret comes from the environment
            assert stat.S_IMODE((var / name).stat().st_mode) == 0o600


def test_a_database_reader_finds_no_upstream_key_in_clear(players) -> None:
    eve: Player = players("sec_files_eve")
    Upstream.objects.create(
        name="gpt-test", base_url="https://api.example.com/v1", upstream_model="gpt-test",
        api_key=UPSTREAM_KEY, usd_per_million_prompt_tokens=1,
        usd_per_million_completion_tokens=1,
    )  # fmt: skip

    query = "SELECT api_key FROM agents_upstream"
    with connection.cursor() as cursor:  # what a dump or a backup holds
        cursor.execute(query)
        stored = [row[0] for row in cursor.fetchall()]
    assert stored and all(UPSTREAM_KEY not in value for value in stored)
    assert all(value.startswith("fernet:") for value in stored)
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):
        # The agent's own `psql`, on a port the firewall (item 13) may already close to it.
        read = eve.shell(
            f"PGCONNECT_TIMEOUT=5 psql -h {db['HOST'] or '127.0.0.1'} -p {db['PORT'] or 5432}"
            f" -U {db['USER']} -d {db['NAME']} -Atc '{query}'"
        )
        assert UPSTREAM_KEY not in read.stdout + read.stderr
        if read.returncode == 0:
            assert "fernet:" in read.stdout
    # The platform itself (the proxy) still gets the key in clear.
    assert Upstream.objects.get(name="gpt-test").api_key == UPSTREAM_KEY


def test_a_secret_file_is_made_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    first = private_secret(path, generate=lambda: "one")
    second = private_secret(path, generate=lambda: "two")
    assert first == second == "one"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    assert private_secret(path, generate=lambda: "three") == "one"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
