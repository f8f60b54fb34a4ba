"""The platform's own files (var/): private to the platform's Unix user.

`var/` holds the database of the demo, the secret key, eval logs with held-out items, every
agent's reports and the local cluster's job folders. Agents are Unix users on the same machine,
so the folder itself is the boundary: it is 0700 and owned by the platform, which makes
everything below it unreachable to any other user whatever its own mode. Its direct entries
are also stripped of group and other bits, so loosening var/ by hand does not expose them.

This runs in settings, before anything else writes there, in every process of the platform.
There is deliberately no process-wide umask: the platform also creates things every agent must
read (the shared base model, the training environment, sandboxes), and a umask would follow
its subprocesses and agents' jobs.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class PrivateFilesError(RuntimeError):
    pass


def private_dir_ensure(path: Path) -> None:
    """Create `path` 0700 if missing; otherwise make it and its direct entries private.

    Fails loudly when the folder belongs to another user and is open to others: the platform
    cannot make it private and must not run on it.
    """
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.geteuid():
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise PrivateFilesError(
                f"{path} belongs to uid {info.st_uid} and is open to other users; run the "
                f"platform as its owner or `chmod 700 {path}`"
            )
        return
    if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_symlink():
                continue  # a link has no mode of its own; what it names is not ours to change
            mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
            if mode & 0o077:
                os.chmod(entry.path, mode & ~0o077, follow_symlinks=False)


def private_secret(path: Path, *, generate: Callable[[], str]) -> str:
    """The secret kept in `path` (0600), made by `generate` on first use.

    Written to a private temporary file and linked into place, so two processes starting at
    once agree on one secret and no reader ever sees a half-written file.
    """
    try:
        return _read_private(path)
    except FileNotFoundError:
        pass
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE
    )
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(generate())
        with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return _read_private(path)


def _read_private(path: Path) -> str:
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor) as file:
        if stat.S_IMODE(os.fstat(file.fileno()).st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(file.fileno(), PRIVATE_FILE_MODE)
        return file.read().strip()
