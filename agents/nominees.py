"""The nominee store: the platform's own copies of nominated checkpoints (issue 12, item 5).

A nominated checkpoint lives in the agent's sandbox, where the agent can swap its weights after
validation, turn a file into a link to a rival's, or break its config. So when a phase freezes
its nominations, each nominated checkpoint is copied into `AGENTS_NOMINEE_STORE` — a folder the
platform owns, 0700, files 0400 — and from then on only that copy is served and evaluated:

- The copy reads the sandbox through `cluster.sandbox_files`: the checkpoint's top-level
  weights (`*.safetensors`) and the settings files a server loads (`COPIED_SETTINGS`), nothing
  else (a link, FIFO, device, sparse file or a hard link to another's file is refused, never
  followed). The weights are bounded by what the registered parameter count implies
  (`MAX_BYTES_PER_PARAMETER` each, plus the headers), each settings file by the validation's
  bounds, all by `AGENTS_NOMINEE_MAX_GIB`, and the store must have room for it all before a
  byte is written. Every byte is hashed as it is copied, so the hashes are those of the copy.
- The copy is validated again (`inspect_checkpoint`, bounded), and its weights must be those
  registered (`Checkpoint.weights_sha256`): weights swapped since registration are refused.
- Before each server start the copy's files are hashed again (`nominee_copy_verify`); a copy
  that changed or cannot be read is marked not servable, with the reason, and skipped.

The copy is made at the freeze rather than at nomination: a nomination is an API request, and
copying tens of GB inside one would outlast it; nominations change freely until the freeze,
and only the final one is copied. From the freeze on, nothing the agent does reaches the copy.
Copies that fail, for whatever reason, are recorded against that nomination alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from agents.checkpoints import (
    MAX_CONFIG_BYTES,
    MAX_SETTINGS_FILE_BYTES,
    MIN_FREE_BYTES,
    SETTINGS_FILES,
    CheckpointInvalid,
    inspect_checkpoint,
)
from agents.models import Nomination, NomineeCopy
from cluster.sandbox_files import (
    HASH_BLOCK,
    MAX_HASH_BYTES,
    Entry,
    SandboxPath,
    UnsafePath,
    file_sha256,
    kind_of,
    locate,
    open_file,
    refuse_sparse,
    walk,
)

log = logging.getLogger(__name__)

MAX_ENTRIES = 10_000  # as checkpoint validation
# Copied beside the weights: what validation and a server load. Nothing else is copied.
COPIED_SETTINGS = frozenset(SETTINGS_FILES | {"model.safetensors.index.json"})
MAX_BYTES_PER_PARAMETER = 4  # float32; bf16/fp16 checkpoints need half
HEADER_SLACK_BYTES = 8 * 1024**2  # a safetensors file's header, beyond its tensors


class NomineeRefused(Exception):
    """The nominated checkpoint cannot be served; the message says why, to the organizers."""


def nominee_store() -> Path:
    """The store, made if missing: the platform's, 0700."""
    store = Path(settings.AGENTS_NOMINEE_STORE)
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = store.lstat()
    if info.st_uid != os.geteuid() or not store.is_dir() or store.is_symlink():
        raise NomineeRefused(f"the nominee store {store} is not a folder of the platform's own")
    store.chmod(0o700)
    return store


def nominee_copy_make(*, nomination: Nomination) -> NomineeCopy:
    """The platform's copy of the nomination's checkpoint, made once (a retry keeps a copy
    already made). Never raises for anything the agent's files can be: a copy that cannot be
    made is recorded as not servable, with the reason."""
    copy, _ = NomineeCopy.objects.get_or_create(nomination=nomination)
    if copy.folder and Path(copy.folder).is_dir():
        return copy
    checkpoint, agent = nomination.checkpoint, nomination.agent
    target = None
    try:
        target, files = _copy(nomination)
        weights = copy_check(target, files, registered_sha256=checkpoint.weights_sha256)
    except (NomineeRefused, OSError) as refused:  # UnsafePath is an OSError
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)
        reason = f"no copy of checkpoint {checkpoint.pk} ({checkpoint.path}): {refused}"
        log.warning("nomination of %s in %s: %s", agent.name, nomination.phase_id, reason)
        NomineeCopy.objects.filter(pk=copy.pk).update(
            folder="", files={}, weights_sha256="", not_servable_reason=reason[:4000],
            not_servable_at=timezone.now(),
        )  # fmt: skip
        copy.refresh_from_db()
        return copy
    NomineeCopy.objects.filter(pk=copy.pk).update(
        folder=str(target), files=files, weights_sha256=weights, not_servable_reason="",
        not_servable_at=None,
    )  # fmt: skip
    copy.refresh_from_db()
    return copy


def copy_check(folder: Path, files: dict[str, str], *, registered_sha256: str) -> str:
    """The weights' sha256 of a checkpoint just copied into `folder` (`files`: each copied
    file's sha256); NomineeRefused unless the copy is a valid checkpoint whose weights are the
    ones registered. Also used by the agents' on-demand evaluation jobs."""
    try:
        inspect_checkpoint(SandboxPath(folder))
    except CheckpointInvalid as invalid:
        raise NomineeRefused(f"the checkpoint is not valid now: {invalid}") from None
    weights = weights_sha256_of(files)
    if weights != registered_sha256:
        raise NomineeRefused(
            f"the checkpoint's weights changed since it was registered "
            f"(sha256 {weights[:12]}…, registered {registered_sha256[:12]}…)"
        )
    return weights


def nominee_copy_verify(copy: NomineeCopy) -> None:
    """Raise NomineeRefused unless the copy holds exactly its recorded files, each with its
    recorded sha256 (read without following a link, within bounds)."""
    if not copy.folder:
        raise NomineeRefused(copy.not_servable_reason or "the checkpoint was never copied")
    folder = SandboxPath(Path(copy.folder))
    try:
        present = {
            entry.where.name: entry
            for entry in walk(folder, max_entries=MAX_ENTRIES)
            if entry.where.parent == folder
        }
    except OSError as exc:
        raise NomineeRefused(f"the copy {copy.folder} cannot be read: {exc}") from None
    if set(present) != set(copy.files):
        changed = sorted(set(present) ^ set(copy.files))
        raise NomineeRefused(f"the copy's files changed in the store: {', '.join(changed)}")
    for name, recorded in sorted(copy.files.items()):
        try:
            found = file_sha256(folder / name)
        except OSError as exc:
            raise NomineeRefused(f"{name} of the copy cannot be read: {exc}") from None
        if found != recorded:
            raise NomineeRefused(
                f"{name} of the copy has sha256 {found[:12]}…, not the {recorded[:12]}… "
                "recorded when it was copied"
            )


def nominee_copy_refuse(*, copy: NomineeCopy, reason: str) -> None:
    """Mark the copy not servable (the arena skips it), saying why."""
    NomineeCopy.objects.filter(pk=copy.pk).update(
        not_servable_reason=reason[:4000], not_servable_at=timezone.now()
    )
    copy.not_servable_reason = reason[:4000]


def _copy(nomination: Nomination) -> tuple[Path, dict[str, str]]:
    """Copy the checkpoint's top-level regular files into a new folder of the store; the
    folder and each file's sha256, taken from the bytes copied."""
    agent, checkpoint = nomination.agent, nomination.checkpoint
    if not agent.sandbox:
        raise NomineeRefused(f"{agent.name} has no sandbox")
    source = locate(Path(agent.sandbox), checkpoint.path)
    store = nominee_store()
    incoming = Path(tempfile.mkdtemp(prefix=f".incoming-{nomination.pk}-", dir=store))
    try:
        files = checkpoint_files_copy(source, incoming, parameters=checkpoint.parameters)
        target = store / f"nomination-{nomination.pk}-{incoming.name.rsplit('-', 1)[-1]}"
        incoming.rename(target)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return target, files


def checkpoint_files_copy(
    source: SandboxPath,
    into: Path,
    *,
    parameters: int,
    max_bytes: int | None = None,
    keep_free_bytes: int = MIN_FREE_BYTES,
) -> dict[str, str]:
    """Copy the weights and the settings files, after checking every bound on the listing:
    at most `max_bytes` in all (what was counted for the copy beforehand, if anything), and
    `keep_free_bytes` left free on `into`'s filesystem afterwards."""
    chosen = checkpoint_files_listed(source, parameters=parameters)
    total = sum(e.info.st_size for e in chosen)
    if max_bytes is not None and total > max_bytes:
        raise NomineeRefused(
            f"the checkpoint is now {total} bytes, more than the {max_bytes} counted for this "
            "copy when it was requested"
        )
    free = shutil.disk_usage(into).free
    if free < total + keep_free_bytes:
        raise NomineeRefused(
            f"the platform's disk has {free} bytes free, too few for {total} while keeping "
            f"{keep_free_bytes} free (organizers: make room and copy again)"
        )
    files: dict[str, str] = {}
    for entry in chosen:  # each no larger than listed: a file grown since is refused
        files[entry.where.name], _ = _copy_file(entry.where, into, entry.info.st_size)
    return files


def checkpoint_copy_bytes(source: SandboxPath, *, parameters: int) -> int:
    """What a copy of the checkpoint at `source` writes, in bytes (the files listed as
    `checkpoint_files_copy` lists them, every bound checked); NomineeRefused or UnsafePath
    when it cannot be copied at all."""
    return sum(e.info.st_size for e in checkpoint_files_listed(source, parameters=parameters))


def checkpoint_files_listed(source: SandboxPath, *, parameters: int) -> list[Entry]:
    """The files a copy of the checkpoint takes: its top-level weights and settings files,
    each a regular dense file within its bound, the weights within what `parameters` can
    need, all within `AGENTS_NOMINEE_MAX_GIB`."""
    try:
        entries = [e for e in walk(source, max_entries=MAX_ENTRIES) if e.where.parent == source]
    except (NotADirectoryError, FileNotFoundError):
        raise NomineeRefused(f"{source} is not a folder") from None
    chosen = []
    for entry in entries:
        name = entry.where.name
        if not (name.endswith(".safetensors") or name in COPIED_SETTINGS):
            continue  # sub-checkpoints, optimizer states, anything else: not served
        if not entry.is_file:
            raise NomineeRefused(
                f"{name} is {kind_of(entry.info.st_mode)}: a checkpoint holds regular files only"
            )
        refuse_sparse(entry.where, entry.info)
        chosen.append(entry)
    weights = [e for e in chosen if e.where.name.endswith(".safetensors")]
    weight_bytes = sum(e.info.st_size for e in weights)
    weight_bound = parameters * MAX_BYTES_PER_PARAMETER + len(weights) * HEADER_SLACK_BYTES
    if weight_bytes > weight_bound:
        raise NomineeRefused(
            f"the weights are {weight_bytes} bytes, more than the {weight_bound} that "
            f"{parameters:,} registered parameters can need"
        )
    for entry in chosen:
        name = entry.where.name
        if name in COPIED_SETTINGS:
            bound = MAX_CONFIG_BYTES if name.endswith("config.json") else MAX_SETTINGS_FILE_BYTES
            if entry.info.st_size > bound:
                raise NomineeRefused(f"{name} is larger than {bound} bytes")
    total = sum(e.info.st_size for e in chosen)
    budget = settings.AGENTS_NOMINEE_MAX_GIB * 1024**3
    if total > budget:
        raise NomineeRefused(f"the checkpoint is {total} bytes, more than the {budget} allowed")
    return chosen


def _copy_file(where: SandboxPath, into: Path, budget: int) -> tuple[str, int]:
    """Copy one file, never reading past its size, MAX_HASH_BYTES or the budget left."""
    digest = hashlib.sha256()
    with open_file(where, dense=True) as source:
        size = os.fstat(source.fileno()).st_size
        if size > min(MAX_HASH_BYTES, budget):
            raise UnsafePath(f"{where} is larger than the {min(MAX_HASH_BYTES, budget)} bytes left")
        fd = os.open(into / where.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as target:
            left = size
            while left > 0 and (block := source.read(min(HASH_BLOCK, left))):
                digest.update(block)
                target.write(block)
                left -= len(block)
            if left:  # it shrank while copied
                raise UnsafePath(f"{where} changed while it was copied")
            os.fchmod(target.fileno(), 0o400)
    return digest.hexdigest(), size


def weights_sha256_of(files: dict[str, str]) -> str:
    """As `checkpoint_register` computes Checkpoint.weights_sha256: over the safetensors files'
    sha256s in name order."""
    weights = sorted(name for name in files if name.endswith(".safetensors"))
    return hashlib.sha256("".join(files[name] for name in weights).encode()).hexdigest()


def nominee_copy_checked(copy: NomineeCopy) -> Path:
    """The copy's folder, once its hashes are verified; a copy that fails is marked not
    servable and NomineeRefused raised."""
    if copy.not_servable_reason:
        raise NomineeRefused(copy.not_servable_reason)
    try:
        nominee_copy_verify(copy)
    except NomineeRefused as refused:
        nominee_copy_refuse(copy=copy, reason=str(refused))
        raise
    return Path(copy.folder)
