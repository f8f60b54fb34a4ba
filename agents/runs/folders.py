"""A run's platform-owned folder (`AGENTS_RUNS_DIR/<id>`: 0700 root, never in a sandbox) and
the outcome its keeper leaves there (`status.json`), read by the supervisor when the database
was away. Standard library only: the keeper, which never loads Django, writes it, and the
keeper's steps, the supervisor and the harness find the folder with it."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def run_folder(runs_dir: Path | str, run_id: int) -> Path:
    """The run's platform-owned folder: 0700 root, never in a sandbox."""
    root = Path(runs_dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = root / str(run_id)
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def run_tmp_key(run_id: int) -> str:
    """The name of the run's private /tmp, /var/tmp on the agent's volume
    (`cluster.private_tmp`): the keeper makes them for the attempt and removes them after it;
    a `command` run's child and each of the arena harness's tool calls run under them."""
    return f"run-{run_id}"


def run_folder_fresh(runs_dir: Path | str, run_id: int) -> Path:
    """The folder of a run just created. Run ids restart with a new database (every `make
    demo` starts from an empty one), so a folder already there holds another run's state and
    status: it is moved aside, kept for the record, and never read as this run's."""
    root = Path(runs_dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    earlier = root / str(run_id)
    if earlier.exists() or earlier.is_symlink():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        os.replace(earlier, root / f"{run_id}.earlier-{stamp}")
    return run_folder(root, run_id)


def status_write(folder: Path, status: dict[str, Any]) -> None:
    temporary = folder / "status.json.tmp"
    temporary.write_text(json.dumps(status, indent=1, default=str) + "\n")
    os.replace(temporary, folder / "status.json")


def status_read(folder: Path) -> dict[str, Any] | None:
    try:
        with open(folder / "status.json", "rb") as handle:
            return json.loads(handle.read(65536))
    except (OSError, ValueError):
        return None
