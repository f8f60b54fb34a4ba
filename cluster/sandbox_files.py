"""Files in a sandbox, touched by the platform without trusting them.

An agent controls everything below its sandbox's root: it can plant symbolic links to other
agents' or the platform's files, FIFOs that block a reader forever, sparse files of a terabyte,
hard links, and it can rename folders while the platform walks them. The platform — often root —
reaches such files only through this module:

- Below the trusted root, every component is opened relative to its folder's descriptor with
  `O_NOFOLLOW`, so a link anywhere below the root is refused, never followed. A folder swapped
  for a link after a check is refused too: there is no check-then-use gap.
- A file is read only after `fstat` says it is a regular file. It is opened with `O_NONBLOCK`,
  so a FIFO cannot block the open. It is never read past a bound.
- A file with several names that the root's owner does not own is refused. That is a hard link
  to somebody else's file: where `fs.protected_hardlinks` is off, an agent can link a root file
  into its sandbox.
- A write creates a fresh file under a random name with `O_EXCL`. It gives the file to the
  agent with `fchown`/`fchmod` on the descriptor, then renames it over the target.
- Walks never enter links and hold two descriptors at most, however deep the tree. A folder
  moved while it is walked stops the walk. Walks and hashes take bounds: entries, total bytes,
  a deadline.
- A sparse file (allocated blocks well below its length) is refused wherever the platform
  hashes or copies it: its holes cost the agent nothing and the platform every byte it reads
  or writes out.

The root itself (a sandbox's home, the sandboxes' parent folder, a platform model) is the
platform's choice and is opened as named. This module imports nothing from other apps.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pwd
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

# A checkpoint shard of a large model is tens of GB; a sparse terabyte is refused before it is
# read, so a hash costs at most this many bytes of reading.
MAX_HASH_BYTES = 128 * 1024**3
HASH_BLOCK = 1 << 20
# A folder hashed as one (a data set) holds at most this many bytes in all.
MAX_TREE_BYTES = 64 * 1024**3
# Below this length a file is never called sparse (small files may sit in one block, or none).
SPARSE_MIN_BYTES = 1 << 20

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading waits for a writer without it. O_NOCTTY: a terminal
# never becomes ours.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class UnsafePath(OSError):
    """A sandbox path the platform will not follow or read: a link, a FIFO, a device, a socket,
    a hard link to someone else's file, a file over the bound, a path outside the root."""


@dataclass(frozen=True)
class SandboxPath:
    """`relative` below the trusted `root`: the root is opened as named, every component of
    `relative` without following links."""

    root: Path
    relative: PurePosixPath = PurePosixPath()

    def __post_init__(self) -> None:
        if self.relative.is_absolute() or ".." in self.relative.parts:
            raise UnsafePath(f"{self.relative} is not a path below {self.root}")

    @property
    def path(self) -> Path:
        return self.root / self.relative

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def suffix(self) -> str:
        return self.path.suffix

    @property
    def suffixes(self) -> list[str]:
        return self.path.suffixes

    @property
    def parent(self) -> SandboxPath:
        return SandboxPath(self.root, self.relative.parent)

    def __truediv__(self, name: str | PurePosixPath) -> SandboxPath:
        return SandboxPath(self.root, self.relative / name)

    def __str__(self) -> str:
        return str(self.path)

    def stat(self) -> os.stat_result:
        """The entry itself (a link's own status, never its target's)."""
        if not self.relative.parts:
            return os.stat(self.root)
        folder = _open_folder(self.parent)
        try:
            return os.stat(self.name, dir_fd=folder, follow_symlinks=False)
        finally:
            os.close(folder)


def locate(root: Path, path: Path | str) -> SandboxPath:
    """`path` (absolute, or relative to `root`) as a SandboxPath below `root`, judged by its
    text alone: `..` is resolved lexically and nothing is followed. Refused outside `root`."""
    candidate = Path(os.path.normpath(root / path))
    for base in (root, root.resolve()):  # a path stored resolved still lies below its root
        try:
            relative = candidate.relative_to(os.path.normpath(base))
        except ValueError:
            continue
        return SandboxPath(root, PurePosixPath(relative))
    raise UnsafePath(f"{candidate} is outside {root}")


def as_sandbox_path(where: SandboxPath | Path) -> SandboxPath:
    """A plain Path is trusted up to its folder: only its last component is not followed."""
    if isinstance(where, SandboxPath):
        return where
    return SandboxPath(where.parent, PurePosixPath(where.name))


def kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


# --- opening ---------------------------------------------------------------------------------


def _open_folder(where: SandboxPath, *, create_for: tuple[int, int] | None = None) -> int:
    """A descriptor of the folder `where`, reached without following a link. With
    `create_for=(uid, gid)`, missing folders are made, 0700 and owned by that user."""
    fd = os.open(where.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    reached = SandboxPath(where.root)
    try:
        for name in where.relative.parts:
            reached = reached / name
            try:
                child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create_for is None:
                    raise
                child = _make_folder(fd, name, create_for)
            except OSError as exc:
                raise _refusal(reached, fd, exc) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_folder(parent: int, name: str, owner: tuple[int, int]) -> int:
    # Made meanwhile (by the agent, say)? It is opened below like any other: links refused.
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    info = os.fstat(fd)
    if info.st_uid == os.geteuid():  # ours: give it to the agent; never re-own the agent's
        os.fchown(fd, *owner)
        os.fchmod(fd, 0o700)
    return fd


def _refusal(where: SandboxPath, folder: int, exc: OSError) -> OSError:
    """Say what stood in the way, in words, when an open refused to go on."""
    if isinstance(exc, FileNotFoundError):
        return exc
    try:
        info = os.stat(where.name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return exc
    if stat.S_ISLNK(info.st_mode):
        return UnsafePath(f"{where} is a symbolic link; links are not followed")
    if exc.errno == errno.ENOTDIR:
        return UnsafePath(f"{where} is {kind_of(info.st_mode)}, not a folder")
    return UnsafePath(f"{where} is {kind_of(info.st_mode)}: {exc.strerror}")


def is_sparse(info: os.stat_result) -> bool:
    """Allocated blocks well below the length: mostly holes."""
    return info.st_size > SPARSE_MIN_BYTES and info.st_blocks * 512 < info.st_size // 2


def refuse_sparse(where: SandboxPath | Path | str, info: os.stat_result) -> None:
    if is_sparse(info):
        raise UnsafePath(
            f"{where} is a sparse file ({info.st_size} bytes long, {info.st_blocks * 512} "
            "allocated): the platform does not hash or copy holes; write the file out in full"
        )


def _check_deadline(deadline: float | None, what: object) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise UnsafePath(f"{what} took longer than the platform allows; use fewer, smaller files")


def open_file(where: SandboxPath | Path, *, dense: bool = False) -> BinaryIO:
    """The regular file at `where`, open for reading; links, FIFOs, devices and sockets are
    refused before a byte is read, and so is another owner's file with several names. With
    `dense`, a sparse file is refused too (for a hash or a copy: every byte will be read)."""
    where = as_sandbox_path(where)
    folder = _open_folder(where.parent)
    try:
        root_owner = os.stat(where.root).st_uid
        try:
            fd = os.open(where.name, _READ_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _refusal(where, folder, exc) from None
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafePath(f"{where} is {kind_of(info.st_mode)}, not a regular file")
    if info.st_nlink > 1 and info.st_uid != root_owner:
        os.close(fd)
        raise UnsafePath(f"{where} is a hard link to a file its folder's owner does not own")
    if dense and is_sparse(info):
        os.close(fd)
        refuse_sparse(where, info)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(where: SandboxPath | Path, *, max_bytes: int, dense: bool = False) -> bytes:
    """The whole file, refused (UnsafePath) if it is larger than `max_bytes` (or, with
    `dense`, sparse)."""
    with open_file(where, dense=dense) as data:
        if os.fstat(data.fileno()).st_size > max_bytes:
            raise UnsafePath(f"{where} is larger than {max_bytes} bytes")
        content = data.read(max_bytes + 1)
    if len(content) > max_bytes:  # it grew while read
        raise UnsafePath(f"{where} is larger than {max_bytes} bytes")
    return content


def read_text(where: SandboxPath | Path, *, max_bytes: int) -> str:
    return read_bytes(where, max_bytes=max_bytes).decode("utf-8", "replace")


def read_link(where: SandboxPath) -> str:
    """The text of the link `where` (what it names, never followed or opened); the folders
    on the way are reached without following links."""
    folder = _open_folder(where.parent)
    try:
        return os.readlink(where.name, dir_fd=folder)
    finally:
        os.close(folder)


def read_tail(where: SandboxPath | Path, *, max_bytes: int) -> bytes:
    """The last `max_bytes` of the file (of a sparse terabyte too: only the end is read)."""
    with open_file(where) as data:
        data.seek(max(0, os.fstat(data.fileno()).st_size - max_bytes))
        return data.read(max_bytes)


def file_sha256(
    where: SandboxPath | Path, *, max_bytes: int = MAX_HASH_BYTES, deadline: float | None = None
) -> str:
    """The sha256 of a regular file's content; the platform's one file hash. A sparse file is
    refused, and so is a hash still running at `deadline` (time.monotonic())."""
    digest = hashlib.sha256()
    with open_file(where) as data:
        info = os.fstat(data.fileno())
        if info.st_size > max_bytes:
            raise UnsafePath(f"{where} is larger than {max_bytes} bytes")
        refuse_sparse(where, info)
        left = max_bytes + 1
        while block := data.read(min(HASH_BLOCK, left)):
            digest.update(block)
            left -= len(block)
            _check_deadline(deadline, f"hashing {where}")
    if left <= 0:
        raise UnsafePath(f"{where} is larger than {max_bytes} bytes")
    return digest.hexdigest()


# --- walking ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    where: SandboxPath
    info: os.stat_result  # the entry's own status: a link is a link

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.info.st_mode)

    @property
    def is_folder(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)


def walk(
    where: SandboxPath | Path,
    *,
    skip_folders: frozenset[str] = frozenset(),
    max_entries: int | None = None,
    deadline: float | None = None,
) -> Iterator[Entry]:
    """Every entry below the folder `where`, depth first, names sorted, a folder before its
    contents. Links and special files are yielded as what they are and never entered; folders
    named in `skip_folders` are yielded but not entered. More than `max_entries` entries, a
    walk still going at `deadline` (time.monotonic()), or a folder moved during the walk,
    raise UnsafePath."""
    where = where if isinstance(where, SandboxPath) else SandboxPath(where)
    fd = _open_folder(where)
    try:
        # One frame per folder on the way down: its status, to check the way back up, and the
        # names still to visit. Only the current folder is open, so depth costs no descriptors.
        frames = [(where, os.fstat(fd), sorted(os.listdir(fd), reverse=True))]
        seen = 0
        while frames:
            folder, _, pending = frames[-1]
            if not pending:
                frames.pop()
                if frames:
                    fd = _back_up(fd, frames[-1][1], folder)
                continue
            name = pending.pop()
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
            seen += 1
            if max_entries is not None and seen > max_entries:
                raise UnsafePath(f"{where} holds more than {max_entries} files and folders")
            _check_deadline(deadline, f"walking {where}")
            yield Entry(folder / name, info)
            if stat.S_ISDIR(info.st_mode) and name not in skip_folders:
                try:
                    child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # replaced meanwhile (by a link, say): not entered
                if not os.path.samestat(os.fstat(child), info):
                    os.close(child)
                    continue
                os.close(fd)
                fd = child
                frames.append((folder / name, info, sorted(os.listdir(fd), reverse=True)))
    finally:
        os.close(fd)


def _back_up(fd: int, expected: os.stat_result, left: SandboxPath) -> int:
    """The parent of `fd`, checked; `fd` is closed on success only (the walk closes it
    otherwise, and must never close a number twice: it may be another thread's file now)."""
    parent = os.open("..", _FOLDER_FLAGS, dir_fd=fd)
    if not os.path.samestat(os.fstat(parent), expected):
        os.close(parent)
        raise UnsafePath(f"{left} was moved while it was walked")
    os.close(fd)
    return parent


def walk_files(
    where: SandboxPath | Path,
    *,
    skip_folders: frozenset[str] = frozenset(),
    max_entries: int | None = None,
) -> Iterator[SandboxPath]:
    """The regular files below `where`, as `walk` finds them; links and FIFOs are left out."""
    for entry in walk(where, skip_folders=skip_folders, max_entries=max_entries):
        if entry.is_file:
            yield entry.where


def tree_sha256(
    where: SandboxPath,
    *,
    max_entries: int,
    max_bytes: int = MAX_TREE_BYTES,
    deadline: float | None = None,
) -> str:
    """The sha256 of a folder: of its files' relative paths and hashes, in path order. A link
    or a special file inside is refused: the hash would not say what it stands for. So is a
    sparse file, more than `max_bytes` in all (all checked before a byte is read), or a hash
    still running at `deadline` (time.monotonic())."""
    files: list[Entry] = []
    total = 0
    for entry in walk(where, max_entries=max_entries, deadline=deadline):
        if entry.is_folder:
            continue
        if not entry.is_file:
            raise UnsafePath(f"{entry.where} is {kind_of(entry.info.st_mode)}; only files count")
        refuse_sparse(entry.where, entry.info)
        total += entry.info.st_size
        if total > max_bytes:
            raise UnsafePath(f"{where} holds more than {max_bytes} bytes")
        files.append(entry)
    digest = hashlib.sha256()
    for entry in files:
        relative = entry.where.relative.relative_to(where.relative)
        hashed = file_sha256(entry.where, max_bytes=max_bytes, deadline=deadline)
        digest.update(f"{relative}\0{hashed}\n".encode())
    return digest.hexdigest()


def disk_usage(where: SandboxPath | Path) -> int:
    """Bytes allocated on disk below the folder `where` (like `du -s`, less the folder itself,
    so an empty sandbox uses 0): blocks, so a sparse file counts what it uses; hard links once;
    links never followed."""
    where = where if isinstance(where, SandboxPath) else SandboxPath(where)
    total = 0
    counted: set[tuple[int, int]] = set()
    for entry in walk(where):
        if entry.info.st_nlink > 1 and not entry.is_folder:
            key = (entry.info.st_dev, entry.info.st_ino)
            if key in counted:
                continue
            counted.add(key)
        total += entry.info.st_blocks * 512
    return total


# --- writing, as the agent's files ------------------------------------------------------------


def user_ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def make_folders(where: SandboxPath, *, user: str) -> None:
    """`where` and the folders above it below the root, those missing made 0700 for `user`."""
    os.close(_open_folder(where, create_for=user_ids(user)))


def write_file(where: SandboxPath, content: bytes | str, *, user: str, mode: int = 0o600) -> None:
    """Replace `where` with a new file holding `content`, owned by `user` with `mode`, making
    missing folders (0700, `user`'s). Whatever the agent left at that name — a link to
    `/etc/passwd`, say — is replaced, never written through."""
    owner = user_ids(user)
    data = content.encode() if isinstance(content, str) else content
    folder = _open_folder(where.parent, create_for=owner)
    try:
        temporary = f".{where.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=folder,
        )
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                os.fchown(file.fileno(), *owner)
                os.fchmod(file.fileno(), mode)
            os.rename(temporary, where.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            raise
    except IsADirectoryError:
        raise UnsafePath(f"{where} is a folder; a file cannot replace it") from None
    finally:
        os.close(folder)


def remove(where: SandboxPath) -> None:
    """Remove `where` (a folder with its contents, or one entry); a link is removed itself,
    nothing it points to. A path whose folder does not exist is already removed."""
    try:
        folder = _open_folder(where.parent)
    except FileNotFoundError:
        return
    try:
        info = os.stat(where.name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            # rmtree with dir_fd walks by descriptors and refuses to enter links.
            shutil.rmtree(where.name, dir_fd=folder)
        else:
            os.unlink(where.name, dir_fd=folder)
    except FileNotFoundError:
        pass
    finally:
        os.close(folder)


def copy_tree(
    source: Path, where: SandboxPath, *, user: str, skip: Callable[[str], bool] = lambda _: False
) -> None:
    """Copy the platform's folder `source` to `where`, as `user`'s files (0600) and folders
    (0700). Names for which `skip` is true are left out. Links in `source` are not copied."""
    make_folders(where, user=user)
    for folder, subfolders, names in os.walk(source):
        subfolders[:] = sorted(name for name in subfolders if not skip(name))
        relative = PurePosixPath(Path(folder).relative_to(source))
        target = where / relative
        make_folders(target, user=user)
        for name in sorted(names):
            file = Path(folder) / name
            if skip(name) or file.is_symlink() or not file.is_file():
                continue
            write_file(target / name, file.read_bytes(), user=user)
