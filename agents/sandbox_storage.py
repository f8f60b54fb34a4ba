"""Where a sandbox's bytes live, and what stops them at the storage quota.

`SandboxStorage` is the one interface: `attach` makes an agent's home its storage (creating it
the first time, growing it when the quota grew), `freeze` keeps it for the audit with no more
writes, `remove` gives it back. Chosen by `settings.AGENTS_SANDBOX_STORAGE`:

- `loop_image`: a sparse ext4 image per agent, the size of its quota, loop-mounted in storage
  only root can reach (`/srv/rsi-arena/images`, 0700). The image's `home/` is bind-mounted as
  the sandbox; its `jobs/` (root's) holds the private `/tmp` of the agent's Slurm jobs
  (infra/slurm/arena_jobtmp.c), local jobs and runs (cluster/private_tmp.py), so a write
  past the quota fails with ENOSPC at write time, in the sandbox and in a job's /tmp alike. This kernel has no ext4/XFS/tmpfs
  quotas (docs: /work/shared/notes/isolation-on-this-machine.md); on a real site the same role
  is played by a ZFS dataset, an XFS or Lustre project quota per agent.
- `plain_directory`: a folder on the host's disk. Only the platform's periodic measurement
  (`cluster.services.storage_measure`) holds the quota: it blocks new jobs, never a write.

Everything here runs as root on paths root owns (the images folder, the sandboxes' root): the
agent's own files are touched only by the agent's user (`cluster.as_user`), never by root.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Protocol

from cluster.as_user import as_user
from cluster.private_tmp import VOLUMES

GIB = 1024**3
IMAGES_DIR = VOLUMES  # where jobs' private /tmp is found too (cluster/private_tmp.py)


class StorageError(RuntimeError):
    pass


class SandboxStorage(Protocol):
    name: str

    def attach(self, *, user: str, home: Path, quota_gib: int) -> None:
        """Make `home` the agent's storage, `quota_gib` large, and writable."""

    def freeze(self, *, user: str, home: Path) -> None:
        """Keep the files where they are for the audit; nothing writes to them any more."""

    def remove(self, *, user: str, home: Path) -> None:
        """Give the storage back: unmount, delete the files and the image."""


class PlainDirectoryStorage:
    """A folder on the host's disk: no limit at write time."""

    name = "plain_directory"

    def attach(self, *, user: str, home: Path, quota_gib: int) -> None:
        home.mkdir(exist_ok=True)

    def freeze(self, *, user: str, home: Path) -> None:
        pass

    def remove(self, *, user: str, home: Path) -> None:
        if _is_mountpoint(home):
            # Made while the storage was a quota image (the setting changed since): give that
            # back as it is, or `rm` stops at the mount and the agent cannot start afresh.
            LoopImageStorage().remove(user=user, home=home)
            return
        _run(["rm", "-rf", "--one-file-system", str(home)])


class LoopImageStorage:
    """A sparse ext4 image per agent, loop-mounted: the filesystem itself stops at the quota."""

    name = "loop_image"

    def __init__(self, images: Path = IMAGES_DIR) -> None:
        self.images = images

    def image(self, user: str) -> Path:
        return self.images / f"{user}.img"

    def volume(self, user: str) -> Path:
        """Where the image is mounted: `home/` (the sandbox) and `jobs/` (jobs' /tmp)."""
        return self.images / user

    def attach(self, *, user: str, home: Path, quota_gib: int) -> None:
        if quota_gib < 1:
            raise StorageError(f"a storage quota of {quota_gib} GiB is too small for a sandbox")
        self.images.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(self.images, 0, 0)
        self.images.chmod(0o700)
        image, volume = self.image(user), self.volume(user)
        created = not image.exists()
        if created:
            _create_image(image, quota_gib)
        if not created:
            self._grow(image, volume, home, quota_gib)
        volume.mkdir(mode=0o700, exist_ok=True)
        if not _is_mountpoint(volume):
            # A job's mount namespace may still hold the image's loop device after the host
            # unmounted it: mount that device again, never a second one on the same file.
            device = _loop_of(image)
            source = ["-o", "nosuid,nodev,noinit_itable", device] if device else [
                "-o", "loop,nosuid,nodev,noinit_itable", str(image)]  # fmt: skip
            _run(["mount", *source, str(volume)])
        inner_home, jobs = volume / "home", volume / "jobs"
        uid, gid = _ids(user)
        for folder, owner in ((inner_home, (uid, gid)), (jobs, (0, 0))):
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chown(folder, *owner)
            folder.chmod(0o700)
        home.mkdir(mode=0o700, exist_ok=True)
        if _is_mountpoint(home):
            _run(["mount", "-o", "remount,bind,rw,nosuid,nodev", str(home)])  # after `freeze`
            return
        self._adopt(user, home, inner_home)
        _run(["mount", "--bind", str(inner_home), str(home)])
        _run(["mount", "-o", "remount,bind,rw,nosuid,nodev", str(home)])

    def freeze(self, *, user: str, home: Path) -> None:
        # Best effort: a file still open for writing (a process the kill has not reaped yet,
        # a job being cancelled) makes the read-only remount fail with EBUSY for a moment.
        for _ in range(25):
            if not _is_mountpoint(home):
                return
            try:
                _run(["mount", "-o", "remount,bind,ro,nosuid,nodev", str(home)])
                return
            except StorageError:
                time.sleep(0.2)

    def remove(self, *, user: str, home: Path) -> None:
        volume = self.volume(user)
        for mountpoint in (home, volume):
            if _is_mountpoint(mountpoint):
                _run(["umount", str(mountpoint)])
        for path in (home, volume):  # the empty mountpoints
            _run(["rm", "-rf", "--one-file-system", str(path)])
        self.image(user).unlink(missing_ok=True)

    def _grow(self, image: Path, volume: Path, home: Path, quota_gib: int) -> None:
        """A larger quota grows the filesystem, offline: resizing a mounted ext4 needs
        CAP_SYS_RESOURCE, which root lacks on these machines. So it grows when nothing uses
        it (a re-provisioned agent); while the agent's processes or jobs hold it, it keeps its
        size until the next attach. A smaller quota is left to the platform's measurement."""
        wanted = quota_gib * GIB
        if _filesystem_bytes(image) >= wanted:
            return
        for mountpoint in (home, volume):
            if (
                _is_mountpoint(mountpoint)
                and subprocess.run(
                    ["umount", str(mountpoint)], capture_output=True, check=False
                ).returncode
            ):
                return  # in use
        if _loop_of(image):
            return  # still mounted in a job's namespace
        if image.stat().st_size < wanted:
            os.truncate(image, wanted)
        # e2fsck -p exits 1 when it fixed something, which is fine before a resize
        if subprocess.run(["e2fsck", "-f", "-p", str(image)], capture_output=True).returncode > 1:
            raise StorageError(f"{image} needs a manual e2fsck before it can grow")
        _run(["resize2fs", str(image)])

    def _adopt(self, user: str, home: Path, inner_home: Path) -> None:
        """Files already in `home` (a sandbox from before images, or useradd's skeleton) move
        into the image, as the agent: root never walks what the agent controls."""
        if not any(home.iterdir()):
            return
        # The agent cannot pass through the images folder: it is handed the image's home as
        # an open folder, which /proc/self/fd/N reaches without the path.
        # setpriv (no PAM session, unlike runuser) keeps that descriptor open.
        target = os.open(inner_home, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            mover = as_user(
                user,
                ["sh", "-c", 'cp -a -- "$1"/. "/proc/self/fd/$2/" && find "$1" -mindepth 1 -delete',
                 "adopt", str(home), str(target)],
                keep_descriptors=True,
            )  # fmt: skip
            moved = subprocess.run(
                mover.argv, env=mover.env, capture_output=True, text=True, check=False, cwd="/",
                pass_fds=(target,),
            )  # fmt: skip
        finally:
            os.close(target)
        if moved.returncode != 0:
            raise StorageError(f"moving {home} into its image failed: {moved.stderr.strip()}")


def _create_image(image: Path, quota_gib: int) -> None:
    """Sparse: the host's disk is used as the agent writes. One inode per 64 KiB, and inode
    tables and the journal not zeroed in advance (noinit_itable at mount), so a 400 GiB
    image costs a few MB until it is used."""
    partial = image.with_suffix(".partial")
    with open(partial, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.truncate(quota_gib * GIB)
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-i", "65536",
          "-E", "lazy_itable_init=1,lazy_journal_init=1", str(partial)])  # fmt: skip
    partial.rename(image)


def _loop_of(image: Path) -> str:
    """The loop device backing `image`, "" if none."""
    found = subprocess.run(
        ["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return found.stdout.split()[0] if found.stdout.split() else ""


def _filesystem_bytes(image: Path) -> int:
    """The ext4 filesystem's own size (its superblock), which may lag the image's."""
    fields = dict(
        line.split(":", 1)
        for line in subprocess.run(
            ["dumpe2fs", "-h", str(image)], capture_output=True, text=True, check=False
        ).stdout.splitlines()
        if ":" in line
    )
    try:
        return int(fields["Block count"]) * int(fields["Block size"])
    except (KeyError, ValueError):
        raise StorageError(f"{image} has no readable ext4 superblock") from None


def _is_mountpoint(path: Path) -> bool:
    target = str(path)
    return any(
        _unescape(line.split()[4]) == target
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as \\ooo."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StorageError(f"{' '.join(command)} failed: {result.stderr.strip()}")


STORAGES: dict[str, type[PlainDirectoryStorage] | type[LoopImageStorage]] = {
    PlainDirectoryStorage.name: PlainDirectoryStorage,
    LoopImageStorage.name: LoopImageStorage,
}


def sandbox_storage(name: str) -> SandboxStorage:
    """The storage named in settings (`AGENTS_SANDBOX_STORAGE`)."""
    try:
        return STORAGES[name]()
    except KeyError:
        raise StorageError(
            f"unknown sandbox storage {name!r}: use one of {', '.join(STORAGES)}"
        ) from None
