"""Shared fixtures: the tiny models, real model servers, a scripted OpenAI-compatible server,
and the arena itself running as a separate daphne process on the test database.

The suite runs on the parts production runs on: PostgreSQL (``DATABASE_URL``) and the Redis
channel layer (``REDIS_URL``), as ``make test`` sets them. Run without them, it stops before
the first test instead of passing on SQLite and the in-memory layer, which hide the locking and
cross-process messaging the tests exist to check. ``ARENA_TEST_EMBEDDED=1`` lets it run on the
embedded defaults anyway, for a quick local loop; such a run proves less.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

from arena.serving.backends import LocalServingBackend
from arena.serving.client import Endpoint
from cluster.backends.slurm import SlurmBackend
from cluster.slurm import cli as slurm_cli
from infra.tiny_models import build_tiny_models
from tests.support.scripted_llm import ScriptedLLM
from tests.support.workers import worker_path

ROOT = Path(__file__).resolve().parent.parent
# Shared by the workers: built once under a lock (`tiny_models`), then only read.
# The default tiny kit (infra/tiny_models DEFAULT_ARCH, the dense Llama), and the competition's
# Nemotron-H architecture in miniature.
TEST_MODELS_DIR = ROOT / "var" / "test-models"
TEST_NEMOTRON_MODELS_DIR = ROOT / "var" / "test-models-nemotron"
TEST_LOG_DIR = worker_path(ROOT / "var" / "test-logs")


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("ARENA_TEST_EMBEDDED") == "1":
        return
    wrong: list[str] = []
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        wrong.append(f"the database is {engine}, not PostgreSQL (set DATABASE_URL)")
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if not layer.startswith("channels_redis."):
        wrong.append(f"the channel layer is {layer}, not channels_redis (set REDIS_URL)")
    if wrong:
        pytest.exit(
            "The test suite runs on PostgreSQL and Redis, as production does: "
            + "; ".join(wrong)
            + ". Run `make test`, or set ARENA_TEST_EMBEDDED=1 to run on the embedded defaults.",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.fixture(scope="session", autouse=True)
def sandboxes_as_plain_folders() -> Iterator[None]:
    """The suite's sandboxes are plain folders (`plain_directory`), in this process and in the
    processes it starts: many tests keep them in temporary folders and delete them directly.
    The production default, a quota image per agent (`loop_image`), is what
    tests/security/test_storage_quota.py and the whole demo (tests/frontend/test_demo_whole.py)
    run on."""
    from django.test import override_settings

    override = override_settings(AGENTS_SANDBOX_STORAGE="plain_directory")
    override.enable()
    previous = os.environ.get("AGENTS_SANDBOX_STORAGE")
    os.environ["AGENTS_SANDBOX_STORAGE"] = "plain_directory"
    yield
    override.disable()
    if previous is None:
        os.environ.pop("AGENTS_SANDBOX_STORAGE", None)
    else:
        os.environ["AGENTS_SANDBOX_STORAGE"] = previous


@pytest.fixture(scope="session", autouse=True)
def benchmarks_from_the_fixture_hub_cache() -> Iterator[None]:
    """The suite reads benchmark data through the production loader from a hub cache of
    fixtures in each data set's own schema (evalsuite/fixtures/hub_cache), never the network;
    the processes it starts (evaluation jobs) inherit it."""
    from evalsuite.hub import CACHE_ENV, FIXTURE_CACHE

    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(FIXTURE_CACHE)
    yield
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous


@pytest.fixture(scope="session")
def tiny_models() -> Path:
    """The full default tiny-model build, made once and reused while up to date. The build
    holds a lock on the folder: the first worker builds, the others wait and find it up to
    date."""
    build_tiny_models(TEST_MODELS_DIR, log=lambda line: print(f"[tiny-models] {line}"))
    return TEST_MODELS_DIR


@pytest.fixture(scope="session")
def tiny_nemotron_models() -> Path:
    """The tiny Nemotron-H kit (hybrid Mamba-attention MoE), built and shared like `tiny_models`."""
    build_tiny_models(
        TEST_NEMOTRON_MODELS_DIR,
        arch="nemotron_h",
        log=lambda line: print(f"[tiny-nemotron] {line}"),
    )
    return TEST_NEMOTRON_MODELS_DIR


@pytest.fixture(scope="session")
def model_servers(tiny_models: Path) -> Iterator[dict[str, Endpoint]]:
    """One real `transformers serve` process per tiny checkpoint."""
    backend = LocalServingBackend(host="127.0.0.1", base_port=0, log_dir=TEST_LOG_DIR)
    names = ["base", "instruct", "markdown"]
    endpoints = backend.start([tiny_models / name for name in names])
    yield dict(zip(names, endpoints, strict=True))
    backend.stop()


@pytest.fixture(scope="session")
def slurm() -> SlurmBackend:
    """The local Slurm cluster that `make test` starts (infra/slurm/setup.sh, as root)."""
    if shutil.which("sbatch") is None or not slurm_cli.available():
        pytest.fail(
            "the local Slurm cluster is not running: run infra/slurm/setup.sh as root (make test does)"
        )
    return SlurmBackend(partition="gpu", parent_account="agents")


@pytest.fixture(scope="session")
def scripted_llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM()
    server.start()
    yield server
    server.stop()


@dataclass(frozen=True)
class LiveArena:
    url: str
    ws_url: str


def _database_url_for_subprocess() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{db.get('HOST') or ''}{port}/{quote(db['NAME'])}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def live_arena(django_db_setup: None, django_db_blocker: object) -> Iterator[LiveArena]:
    """The arena as production runs it: daphne in its own process, on the test database and
    the configured channel layer. Tests that use it commit their rows (see `arena`)."""
    # Bound here and handed to daphne (--fd): a port picked and let go could be another
    # worker's by the time daphne, seconds later, binds it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "ARENA_MIN_VOTE_SECONDS": "0.5",
        # Paced release runs at a pace that keeps crowds of simulated voters quick and still
        # shows an answer piece by piece (20 characters every 50 ms tick).
        "ARENA_STREAM_CHARS_PER_SECOND": "400",
        "ARENA_BATTLES_PER_MINUTE": "1000",
        "ARENA_BATTLES_PER_MINUTE_PER_IP": "1000",
        "ARENA_MAX_TOKENS": "48",
        "ARENA_GENERATION_TIMEOUT_S": "30",
        "EVALS_AGENT_MAX_TOKENS": "32",  # agents' on-demand evaluations of tiny models
        # The agent API submits to the real local cluster when it is there (always in CI).
        "CLUSTER_BACKEND": "slurm" if shutil.which("sbatch") and slurm_cli.available() else "local",
    }
    TEST_LOG_DIR.mkdir(parents=True, exist_ok=True)
    with (TEST_LOG_DIR / "daphne.log").open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "--fd",
                str(listener.fileno()),
                # As the demo's site does: beside training workers on two cores, a battle's
                # socket can take longer than daphne's 5 s default to be accepted, and a
                # simulated voter then lost its handshake and stopped the crowd.
                "--websocket_connect_timeout",
                "60",
                "arena.asgi:application",
            ],
            # Run from the log folder, not the checkout: `security check` counts the site
            # processes run from the checkout as its deployment (security/listening.py), and
            # a test's arena on a spare port is not that deployment.
            cwd=TEST_LOG_DIR,
            env={
                **env,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(listener.fileno(),),
        )
    listener.close()  # daphne holds its own copy
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"daphne exited with {process.returncode}; see {TEST_LOG_DIR / 'daphne.log'}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield LiveArena(url=f"http://127.0.0.1:{port}", ws_url=f"ws://127.0.0.1:{port}")
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture
def arena(live_arena: LiveArena, transactional_db: None) -> Iterator[LiveArena]:
    """The live arena, with this test's database rows committed so the server sees them.
    Afterwards it waits for the server to finish what the test asked of it before the tables
    are emptied: a reply can reach the test before the server's last write (a settlement, a
    trajectory event) commits, and emptying the tables under that write deadlocks."""
    yield live_arena
    server_writes_wait()


def server_writes_wait(timeout_s: float = 30, quiet_s: float = 0.3) -> None:
    """Until no other session on this test database has run a statement or held a transaction
    open for `quiet_s` (at most `timeout_s`; the flush then reports whatever still holds it)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() "
                "AND (state = 'active' OR state LIKE 'idle in transaction%%')"
            )
            if cursor.fetchone()[0]:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                return
            time.sleep(0.05)
