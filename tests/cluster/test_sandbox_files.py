"""cluster.sandbox_files on real files: what each primitive refuses, bounds and keeps.

The attacks played by real agent users are in tests/security/test_sandbox_links.py; these pin
the module's own promises (no Django, no users but root and nobody)."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from cluster.sandbox_files import (
    SandboxPath,
    UnsafePath,
    disk_usage,
    file_sha256,
    locate,
    read_bytes,
    read_link,
    read_tail,
    tree_sha256,
    walk,
    walk_files,
    write_file,
)


@pytest.fixture
def sandbox(tmp_path: Path) -> SandboxPath:
    (tmp_path / "data" / "nested").mkdir(parents=True)
    (tmp_path / "data" / "a.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "data" / "nested" / "b.txt").write_text("b\n")
    (tmp_path / "data.txt").write_text("top\n")
    return SandboxPath(tmp_path)


def test_locate_judges_by_text_and_refuses_what_leaves_the_root(sandbox):
    assert locate(sandbox.root, "data/../data.txt").relative == PurePosixPath("data.txt")
    assert locate(sandbox.root, sandbox.root / "data").relative == PurePosixPath("data")
    with pytest.raises(UnsafePath, match="outside"):
        locate(sandbox.root, "data/../../etc/passwd")
    with pytest.raises(UnsafePath, match="outside"):
        locate(sandbox.root, "/etc/passwd")


def test_links_fifos_and_oversized_files_are_refused_before_reading(sandbox):
    root = sandbox.root
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "through").symlink_to(root / "data")
    os.mkfifo(root / "pipe")
    with pytest.raises(UnsafePath, match="symbolic link"):
        read_bytes(sandbox / "passwd", max_bytes=1 << 20)
    with pytest.raises(UnsafePath, match="symbolic link"):
        read_bytes(sandbox / "through" / "a.jsonl", max_bytes=1 << 20)
    with pytest.raises(UnsafePath, match="FIFO"):
        read_bytes(sandbox / "pipe", max_bytes=1 << 20)
    with pytest.raises(UnsafePath, match="larger than 3 bytes"):
        read_bytes(sandbox / "data.txt", max_bytes=3)
    assert read_bytes(sandbox / "data.txt", max_bytes=4) == b"top\n"


def test_a_links_text_is_read_without_following_it_or_a_linked_folder(sandbox, tmp_path):
    (tmp_path / "data" / "to_passwd").symlink_to("/etc/passwd")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "inner").symlink_to("../../blobs/abc")
    (tmp_path / "data" / "via").symlink_to(tmp_path / "elsewhere")

    assert read_link(sandbox / "data" / "to_passwd") == "/etc/passwd"
    with pytest.raises(UnsafePath, match="symbolic link"):
        read_link(sandbox / "data" / "via" / "inner")
    with pytest.raises(OSError):
        read_link(sandbox / "data" / "a.jsonl")  # not a link


def test_the_tail_of_a_sparse_terabyte_is_read_alone(sandbox):
    sparse = sandbox.root / "sparse.out"
    with sparse.open("wb") as out:
        out.truncate(1 << 40)
        out.seek((1 << 40) - 4)
        out.write(b"end\n")
    assert read_tail(sandbox / "sparse.out", max_bytes=8) == b"\0\0\0\0end\n"
    assert disk_usage(sandbox) < 1 << 20  # blocks, not the apparent terabyte
    with pytest.raises(UnsafePath, match="larger than"):
        file_sha256(sandbox / "sparse.out", max_bytes=1 << 30)


def test_a_hard_link_to_a_file_the_owner_does_not_own_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    os.link(secret, home / "secret")
    with pytest.raises(UnsafePath, match="hard link"):
        read_bytes(SandboxPath(home) / "secret", max_bytes=100)


def test_walks_list_links_as_links_and_never_enter_them(sandbox):
    (sandbox.root / "data" / "etc").symlink_to("/etc")
    kinds = {str(e.where.relative): e.is_file for e in walk(sandbox)}
    assert "data/etc" in kinds and not any(name.startswith("data/etc/") for name in kinds)
    files = [str(f.relative) for f in walk_files(sandbox)]
    assert files == ["data/a.jsonl", "data/nested/b.txt", "data.txt"]


def test_a_walk_goes_deeper_than_path_max_and_python_recursion(sandbox):
    folder = os.open(sandbox.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(2100):  # 4200 bytes of path: no call by name could reach the bottom
            os.mkdir("d", dir_fd=folder)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = child
        fd = os.open("deep.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=folder)
        os.write(fd, os.urandom(1 << 20))
        os.close(fd)
    finally:
        os.close(folder)
    try:
        deepest = [f for f in walk_files(sandbox) if f.name == "deep.bin"]
        assert len(deepest) == 1 and len(deepest[0].relative.parts) == 2101
        assert disk_usage(sandbox) >= 1 << 20
    finally:  # pytest's own clean-up recurses and would fail on it in a later session
        subprocess.run(["rm", "-rf", str(sandbox.root / "d")], check=True)


def test_a_folder_hash_is_the_one_registration_always_stored(sandbox):
    folder = sandbox.root / "data"
    expected = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        line = f"{file.relative_to(folder)}\0{hashlib.sha256(file.read_bytes()).hexdigest()}\n"
        expected.update(line.encode())
    assert tree_sha256(sandbox / "data", max_entries=100) == expected.hexdigest()
    os.mkfifo(folder / "pipe")
    with pytest.raises(UnsafePath, match="FIFO"):
        tree_sha256(sandbox / "data", max_entries=100)
    with pytest.raises(UnsafePath, match="more than 2"):
        tree_sha256(sandbox / "data", max_entries=2)


def test_a_write_replaces_a_planted_link_and_gives_the_file_to_the_user(sandbox, tmp_path):
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    (sandbox.root / "out.json").symlink_to(canary)
    write_file(sandbox / "new" / "deeper" / "out.json", "{}", user="nobody")
    write_file(sandbox / "out.json", "{}", user="nobody", mode=0o640)
    nobody = pwd.getpwnam("nobody").pw_uid
    assert canary.read_text() == "root's\n"
    written = (sandbox.root / "out.json").lstat()
    assert (written.st_uid, written.st_mode & 0o777) == (nobody, 0o640)
    made = (sandbox.root / "new" / "deeper").lstat()
    assert (made.st_uid, made.st_mode & 0o777) == (nobody, 0o700)
    leftovers = [p.name for p in sandbox.root.rglob("*.tmp")]
    assert leftovers == []
