"""Where agents live: a home directory only its own Unix user can read.

`UnixSandboxes` (needs root) creates a Unix user per agent whose home is the sandbox, mode
0700, so agents cannot read each other's files and their jobs run as themselves. There is no
local stand-in: isolation is the point, and these machines run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path


class SandboxError(RuntimeError):
    pass


class UnixSandboxes:
    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, user: str) -> Path:
        if os.geteuid() != 0:
            raise SandboxError("creating sandboxes needs root (a Unix user per agent)")
        home = self.root / user
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # others may pass through to their own home, not list it
        try:
            pwd.getpwnam(user)
            _run(["usermod", "--unlock", "--expiredate", "", user])
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
        home.mkdir(exist_ok=True)
        shutil.chown(home, user=user, group=user)
        home.chmod(0o700)
        return home

    def write_private(self, user: str, path: Path, content: str, *, mode: int = 0o600) -> None:
        """Write a file only `user` can read (0600, or 0700 for a program), creating its
        folders (0700)."""
        for folder in reversed([path.parent, *path.parent.parents]):
            if folder in self.root.parents or folder == self.root or folder.exists():
                continue
            folder.mkdir()
            shutil.chown(folder, user=user, group=user)
            folder.chmod(0o700)
        tmp = path.with_name(path.name + ".tmp")
        tmp.touch(mode=0o600)
        tmp.write_text(content)
        shutil.chown(tmp, user=user, group=user)
        tmp.chmod(mode)
        tmp.replace(path)

    def lock(self, user: str) -> None:
        """The user can no longer log in or run anything new; its files stay for the audit."""
        try:
            pwd.getpwnam(user)
        except KeyError:
            return
        _run(["usermod", "--lock", "--expiredate", "1", user])
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SandboxError(f"{command[0]} failed: {result.stderr.strip()}")
