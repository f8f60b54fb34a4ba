"""An agent's files as the audits read them: paths the platform stored, resolved below the
agent's sandbox without following anything the agent planted on the way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from agents.models import Agent, Checkpoint, DataRecord, Nomination, NomineeCopy
from cluster.sandbox_files import SandboxPath, UnsafePath, as_sandbox_path, locate
from safety import files
from safety.budget import Budget


def agent_path(agent: Agent, stored: str) -> SandboxPath:
    """A path the platform stored for the agent (a data record's, a checkpoint's), to be read
    below the agent's sandbox without following anything the agent planted on the way."""
    if agent.sandbox:
        with contextlib.suppress(UnsafePath):
            return locate(Path(agent.sandbox), stored)
    return as_sandbox_path(Path(stored))  # outside any sandbox: trusted up to its folder


def nominee_folder(nomination: Nomination) -> SandboxPath:
    """What the arena serves for `nomination`: the platform's copy once the phase froze
    (agents/nominees.py); before that, the checkpoint as registered, in the agent's sandbox.
    Never the sandbox's files as they are now, once there is a copy."""
    copy = NomineeCopy.objects.filter(nomination=nomination).exclude(folder="").first()
    if copy is not None:
        return SandboxPath(Path(copy.folder))
    return agent_path(nomination.agent, nomination.checkpoint.path)


def _checkpoint_dirs(agent: Agent) -> list[Path]:
    return [
        agent_path(agent, p).path
        for p in Checkpoint.objects.filter(agent=agent).values_list("path", flat=True)
    ]


class AgentFiles:
    """Files of the agent's registered data and sandbox, once each, outside its checkpoints
    (those are read by the checkpoint checks), walked lazily within `budget`: iterating
    raises BudgetSpent once it is spent, and `left_unread()` then says what the walk did not
    reach. Links, FIFOs and devices are never among them."""

    def __init__(self, agent: Agent, budget: Budget | None = None) -> None:
        self.budget = budget
        self.roots = [
            agent_path(agent, p)
            for p in DataRecord.objects.filter(agent=agent).values_list("path", flat=True)
        ]
        if agent.sandbox:
            self.roots.append(SandboxPath(Path(agent.sandbox)))
        self._skip = _checkpoint_dirs(agent)
        self._current = 0  # the root being walked; len(roots) once all are

    def __iter__(self) -> Iterator[SandboxPath]:
        seen: set[Path] = set()
        for index, root in enumerate(self.roots):
            self._current = index
            for file in files.walk(root, self.budget):
                path = file.path
                if path in seen or any(d == path or d in path.parents for d in self._skip):
                    continue
                seen.add(path)
                yield file
        self._current = len(self.roots)

    def left_unread(self) -> list[str]:
        """What the walk has not reached yet: the rest of the root it is in, and the roots
        after it."""
        if self._current >= len(self.roots):
            return []
        root = self.roots[self._current]
        at = self.budget.at if self.budget is not None else None
        rest = f"{root}: everything after {at} (depth first, names sorted)" if at else str(root)
        return [rest, *(str(r) for r in self.roots[self._current + 1 :])]


def agent_files(agent: Agent, budget: Budget | None = None) -> AgentFiles:
    return AgentFiles(agent, budget)
