"""Where agents live: a home directory only its own Unix user can read.

`UnixSandboxes` (needs root) creates a Unix user per agent whose home is the sandbox, mode
0700, so agents cannot read each other's files and their jobs run as themselves. There is no
local stand-in: isolation is the point, and these machines run as root. Files root puts in a
sandbox go through `cluster.sandbox_files`, which never follows what the agent planted there.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from django.conf import settings

from agents.sandbox_storage import SandboxStorage, sandbox_storage
from cluster.sandbox_files import locate, user_ids, write_file


class SandboxError(RuntimeError):
    pass


class UnixSandboxes:
    def __init__(self, root: Path, storage: SandboxStorage | None = None) -> None:
        self.root = root
        # Where the sandbox's bytes live and what holds them to the quota (agents/sandbox_storage.py)
        self.storage = storage or sandbox_storage(settings.AGENTS_SANDBOX_STORAGE)

    def create(self, user: str, *, storage_gib: int | None = None) -> Path:
        if os.geteuid() != 0:
            raise SandboxError("creating sandboxes needs root (a Unix user per agent)")
        home = self.root / user
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # others may pass through to their own home, not list it
        try:
            entry = pwd.getpwnam(user)
            # A user made under another sandbox root keeps its name; its home (HOME in every
            # process started as it) becomes this sandbox. The folder is not moved.
            moved = ["--home", str(home)] if entry.pw_dir != str(home) else []
            _run(["usermod", "--unlock", "--expiredate", "", *moved, user])
        except KeyError:
            _run(
                [
                    "useradd",
                    "--home-dir",
                    str(home),
                    "--create-home",
                    "--shell",
                    "/bin/bash",
                    "--user-group",
                    user,
                ]
            )
        self.storage.attach(
            user=user, home=home, quota_gib=storage_gib or settings.AGENTS_DEFAULT_STORAGE_GIB
        )
        # A re-provisioned agent's home is its own folder from before: changed through a
        # descriptor opened without following a link, never by name.
        folder = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchown(folder, *user_ids(user))
            os.fchmod(folder, 0o700)
        finally:
            os.close(folder)
        return home

    def write_private(self, user: str, path: Path, content: str, *, mode: int = 0o600) -> None:
        """Write a file only `user` can read (0600, or 0700 for a program), creating its
        folders (0700). Root writes here into a folder the agent controls, so nothing below
        the sandboxes' root is followed: a link the agent planted at the name, at a temporary
        name or at a folder is replaced or refused, never written through (UnsafePath)."""
        write_file(locate(self.root, path), content, user=user, mode=mode)

    def lock(self, user: str) -> None:
        """The user can no longer log in or run anything new; its files stay for the audit."""
        try:
            pwd.getpwnam(user)
        except KeyError:
            return
        _run(["usermod", "--lock", "--expiredate", "1", user])
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        self.storage.freeze(user=user, home=self.root / user)

    def remove(self, user: str) -> None:
        """After the audit: the sandbox's storage and files are given back (the user stays)."""
        self.storage.remove(user=user, home=self.root / user)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SandboxError(f"{command[0]} failed: {result.stderr.strip()}")
