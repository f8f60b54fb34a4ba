"""An agent's processes outside Slurm write their temporary files inside its storage quota.

On Slurm, the SPANK plugin `arena_jobtmp` (infra/slurm/arena_jobtmp.c) gives each task of an
agent's job a mount namespace of its own. This module does the same for what the platform
starts as an agent on this host itself: local-backend jobs, the agent's own runs and each tool
call of its arena harness. When the agent has a quota volume (`agents/sandbox_storage.py`,
`loop_image`, mounted at `VOLUMES/<user>`), the command runs in a mount namespace of its own
in which

- `/tmp` and `/var/tmp` are `<volume>/jobs/<key>/tmp` and `…/var-tmp`: counted against the
  agent's quota, `No space left on device` past it, and hidden from everyone else;
- `/dev/shm` is a fresh tmpfs of `shm_mib`, private to the run and gone with it.

A user without a volume (the platform, organizers, `plain_directory` storage) gets no private
folders (`prepare` says None). `release` deletes the run's folders once it is over. Everything here runs as root on
folders root owns (the volume's top and `jobs/`); the agent's files inside are never followed.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Where agents' quota volumes are mounted; infra/slurm/arena_jobtmp.c and epilog.sh read it too.
VOLUMES = Path("/srv/rsi-arena/images")
DEFAULT_SHM_MIB = 512
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")

# Runs as root in the new namespace, then becomes the agent: $1 tmp, $2 var-tmp, $3 shm size.
_ENTER = (
    'mount --bind -- "$1" /tmp && mount --bind -- "$2" /var/tmp && '
    'mount -t tmpfs -o "size=$3m,mode=1777,nosuid,nodev" tmpfs /dev/shm && '
    'shift 3 && exec "$@"'
)


class PrivateTmpError(RuntimeError):
    pass


def volume_of(user: str) -> Path | None:
    """The agent's mounted quota volume, or None when it has none."""
    volume = VOLUMES / user
    try:
        own, parent = os.lstat(volume), os.stat(VOLUMES)
    except OSError:
        return None
    # A volume is a mount: its device differs from the folder it is mounted in.
    if not stat.S_ISDIR(own.st_mode) or own.st_dev == parent.st_dev:
        return None
    return volume


@dataclass(frozen=True)
class PrivateTmp:
    """A run's private temporary folders on the agent's volume, and how to enter them."""

    folder: Path  # <volume>/jobs/<key>: root's; its tmp/ and var-tmp/ are the agent's
    prefix: list[str]  # put before the command run as the agent (setpriv, runuser)


def prepare(user: str, key: str, *, shm_mib: int = DEFAULT_SHM_MIB) -> PrivateTmp | None:
    """The private /tmp, /var/tmp and /dev/shm of one run of `user`, on its volume; None when
    it has none. `key` names the run's folder (e.g. "local-<job id>"): one per concurrent run.
    """
    volume = volume_of(user)
    if volume is None:
        return None
    if not _KEY.fullmatch(key):
        raise PrivateTmpError(f"not a run key: {key!r}")
    uid, gid = _ids(user)
    run = _root_folder(volume / "jobs", key, mode=0o755)
    folders = [_agent_folder(run / name, uid, gid) for name in ("tmp", "var-tmp")]
    prefix = [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", _ENTER, "private-tmp", *map(str, folders), str(shm_mib),
    ]  # fmt: skip
    return PrivateTmp(folder=run, prefix=prefix)


def release(private: PrivateTmp | None) -> None:
    """Delete a finished run's folders: its bytes leave the agent's quota."""
    if private is not None:
        subprocess.run(release_command(private), check=False, capture_output=True)


def release_command(private: PrivateTmp) -> list[str]:
    """The command that deletes the run's folders, for a wrapper that outlives this process.
    rm follows no link and stays on the volume: the agent's files are only unlinked."""
    return ["rm", "-rf", "--one-file-system", "--", str(private.folder)]


def _root_folder(path: Path, name: str, *, mode: int) -> Path:
    """`name` in root's `path` (created if missing), root's, never a link."""
    path.mkdir(mode=0o700, exist_ok=True)
    folder = path / name
    folder.mkdir(mode=mode, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise PrivateTmpError(f"{folder} is not root's folder")
    os.chmod(folder, mode)
    return folder


def _agent_folder(folder: Path, uid: int, gid: int) -> Path:
    """The agent's 0700 folder, made by root in root's run folder (so no link can be there)."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if folder.is_symlink() or not folder.is_dir():
            raise PrivateTmpError(f"{folder} is not a folder") from None
    # Only root can reach the run folder (the agent sees this one as /tmp, never its parent),
    # so the name cannot have been swapped for a link since the check above.
    os.chown(folder, uid, gid, follow_symlinks=False)
    folder.chmod(0o700)
    return folder


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
