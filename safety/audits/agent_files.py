"""An agent's files as the audits read them: paths the platform stored, resolved below the
agent's sandbox without following anything the agent planted on the way."""

from __future__ import annotations

import contextlib
from pathlib import Path

from agents.models import Agent, Checkpoint, DataRecord
from cluster.sandbox_files import SandboxPath, UnsafePath, as_sandbox_path, locate
from safety import files


def agent_path(agent: Agent, stored: str) -> SandboxPath:
    """A path the platform stored for the agent (a data record's, a checkpoint's), to be read
    below the agent's sandbox without following anything the agent planted on the way."""
    if agent.sandbox:
        with contextlib.suppress(UnsafePath):
            return locate(Path(agent.sandbox), stored)
    return as_sandbox_path(Path(stored))  # outside any sandbox: trusted up to its folder


def _checkpoint_dirs(agent: Agent) -> list[Path]:
    return [
        agent_path(agent, p).path
        for p in Checkpoint.objects.filter(agent=agent).values_list("path", flat=True)
    ]


def agent_files(agent: Agent) -> list[SandboxPath]:
    """Files of the agent's registered data and sandbox, once each, outside its checkpoints
    (those are read by the checkpoint checks). Links, FIFOs and devices are never among them."""
    roots = [
        agent_path(agent, p)
        for p in DataRecord.objects.filter(agent=agent).values_list("path", flat=True)
    ]
    if agent.sandbox:
        roots.append(SandboxPath(Path(agent.sandbox)))
    skip = _checkpoint_dirs(agent)
    seen: set[Path] = set()
    found: list[SandboxPath] = []
    for root in roots:
        for file in files.walk(root):
            path = file.path
            if path in seen or any(d == path or d in path.parents for d in skip):
                continue
            seen.add(path)
            found.append(file)
    return found
