"""Put the reference agent's code where an agent can run it: its own sandbox.

The platform's checkout need not be readable by agents, so the package is copied into the
sandbox, owned by the agent's Unix user and readable by it alone, like anything else an agent
brings. Only the standard library (and `cluster.sandbox_files`, itself standard library only)
is used, so the organizer's tools and tests can call it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from cluster.sandbox_files import SandboxPath, copy_tree, remove, write_file

PACKAGE = Path(__file__).resolve().parent
LEFT_OUT = {"__pycache__", "README.md"}


def reference_agent_install(sandbox: Path, unix_user: str) -> Path:
    """Copy `agents/reference` to `SANDBOX/reference-agent/agents/reference` (replacing an
    earlier copy) and return `SANDBOX/reference-agent`: the folder to put on PYTHONPATH, from
    which `python -m agents.reference ...` runs.

    Root writes into the agent's sandbox here, so every file is made through descriptors that
    follow no link, as the agent's own (0600, folders 0700). A link the agent planted on the
    way raises UnsafePath; nothing outside the sandbox is written or re-owned."""
    root = SandboxPath(sandbox, PurePosixPath("reference-agent"))
    target = root / "agents" / "reference"
    remove(target)
    write_file(root / "agents" / "__init__.py", "", user=unix_user)
    copy_tree(
        PACKAGE,
        target,
        user=unix_user,
        skip=lambda name: name in LEFT_OUT or name.endswith(".pyc"),
    )
    return root.path
