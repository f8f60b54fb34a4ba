"""Put the reference agent's code where an agent can run it: its own sandbox.

The platform's checkout need not be readable by agents, so the package is copied into the
sandbox, owned by the agent's Unix user and readable by it alone, like anything else an agent
brings. Only the standard library is used, so the organizer's tools and tests can call it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def reference_agent_install(sandbox: Path, unix_user: str) -> Path:
    """Copy `agents/reference` to `SANDBOX/reference-agent/agents/reference` (replacing an
    earlier copy) and return `SANDBOX/reference-agent`: the folder to put on PYTHONPATH, from
    which `python -m agents.reference ...` runs."""
    root = sandbox / "reference-agent"
    target = root / "agents" / "reference"
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    (target.parent / "__init__.py").write_text("")
    shutil.copytree(
        PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "README.md")
    )
    for path in [root, *root.rglob("*")]:
        shutil.chown(path, user=unix_user, group=unix_user)
        path.chmod(0o700 if path.is_dir() else 0o600)
    return root
