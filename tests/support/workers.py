"""What each pytest-xdist worker keeps to itself on the shared machine.

`make test` runs the suite on several workers at once (``pytest -n``). They share one
PostgreSQL server, one Redis, one Slurm cluster, one nftables table and one set of Unix users,
so everything a test makes there is named for its worker:

- the test database (pytest-django appends the worker id: ``test_arena_gw0``);
- a Redis database index of its own (``REDIS_URL``'s index plus one plus the worker's number);
- agents' Unix users and Slurm accounts (``AGENTS_UNIX_USER_PREFIX``: ``agent_w0_alice``);
- sandbox roots, run folders, nominee and model stores, the runs' cgroup root and the suite's
  logs (``worker_path``: ``/tmp/arena-sandboxes-test-w0``);
- ports: the suite's servers bind port 0 and keep the socket, so the OS picks them;
- one CPU thread per process (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``), and OpenMP
  threads that sleep when idle instead of spinning (``OMP_WAIT_POLICY=PASSIVE``, for the few
  that pin their own thread count, like the tiny-model kit): four workers and their training
  jobs and model servers on two cores, each with a thread per core, spent their time spinning
  against each other (a 14-second LoRA run took over 300 seconds, a 9-second build 194);
- the checkpoint probe's time limit (``AGENTS_CHECKPOINT_PROBE_TIMEOUT_S``: 600 s, not 120):
  importing transformers and building a tiny model on the meta device takes 8 s alone, and
  took over 120 s beside three workers training on the same two cores, refusing a good
  checkpoint in a fresh-clone CI. A hostile config is still cut off, later.

This module is loaded as a plugin (``-p tests.support.workers`` in pyproject's addopts), so
the environment is set before pytest-django reads the settings, and every process a test
starts (daphne, the demo, harnesses, Slurm jobs) inherits it. Outside xdist (a plain ``pytest``
run, the serial group) nothing is renamed.

Only the worker that made a thing removes it: tests clean up what their fixtures made, and no
worker wipes a shared root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

WORKER_ID = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... under xdist
_number = re.fullmatch(r"gw(\d+)", WORKER_ID)
WORKER_NUMBER: int | None = int(_number.group(1)) if _number else None
# Short, because it goes into Unix user names (32 characters at most).
WORKER_TAG = f"w{WORKER_NUMBER}" if WORKER_NUMBER is not None else ""
# Redis has 16 databases; the suite's own index plus one per worker must fit.
MAX_WORKERS = 12


def worker_path(path: Path | str) -> Path:
    """`path` with this worker's tag appended to its last part (unchanged outside xdist)."""
    path = Path(path)
    return path.with_name(f"{path.name}-{WORKER_TAG}") if WORKER_TAG else path


def worker_name(name: str) -> str:
    """`name` with this worker's tag in front (w0_name; unchanged outside xdist)."""
    return f"{WORKER_TAG}_{name}" if WORKER_TAG else name


def unix_user_prefix() -> str:
    """The prefix of this worker's agents' Unix users and Slurm accounts."""
    return f"agent_{WORKER_TAG}_" if WORKER_TAG else "agent_"


def agent_user(name: str) -> str:
    """The Unix user (and Slurm account) of agent `name` provisioned on this worker."""
    return unix_user_prefix() + name


def _redis_url_for_worker(url: str, number: int) -> str:
    base, _, index = url.rpartition("/")
    if not base.startswith(("redis://", "rediss://")) or not index.isdigit():
        raise RuntimeError(f"REDIS_URL {url!r} does not end in a database index (/N)")
    worker_index = int(index) + 1 + number
    if worker_index > 15:
        raise RuntimeError(
            f"REDIS_URL {url!r}: worker {number} would need Redis database {worker_index}; "
            f"run at most {MAX_WORKERS} workers or start from a lower index"
        )
    return f"{base}/{worker_index}"


def _namespace_environment() -> None:
    if WORKER_NUMBER is None:
        return
    if WORKER_NUMBER >= MAX_WORKERS:
        raise RuntimeError(f"the suite runs on at most {MAX_WORKERS} workers")
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = _redis_url_for_worker(os.environ["REDIS_URL"], WORKER_NUMBER)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ.setdefault("AGENTS_CHECKPOINT_PROBE_TIMEOUT_S", "600")
    os.environ["AGENTS_UNIX_USER_PREFIX"] = unix_user_prefix()
    os.environ["AGENTS_RUNS_CGROUP_ROOT"] = f"rsi-arena-{WORKER_TAG}"
    for name, default in {
        "AGENTS_SANDBOX_ROOT": "/srv/rsi-arena/sandboxes",
        "AGENTS_RUNS_DIR": "/srv/rsi-arena/runs",
        "AGENTS_SHARED_MODELS_DIR": "/srv/rsi-arena/models",
        "AGENTS_NOMINEE_STORE": "/srv/rsi-arena/nominees",
    }.items():
        os.environ[name] = str(worker_path(os.environ.get(name) or default))


_namespace_environment()
