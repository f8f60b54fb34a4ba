"""Benchmark data sets from the Hugging Face hub: pinned, fetched once, read offline.

Each hub-backed benchmark names a data set repository, the commit it is pinned to (inspect_evals'
pin where it has one) and the files of the split it evaluates, as glob patterns in the
repository's own layout (`main/test-*.parquet`). `fetch` downloads exactly those files into the
standard hub cache with `huggingface_hub.snapshot_download`; `records` resolves the same
snapshot with `local_files_only=True` (no network, ever) and reads its rows.

Reading goes through the resolved snapshot folder rather than `datasets.load_dataset(repo_id,
revision=...)`, because the latter needs the network even when the hub cache holds the
snapshot (see the shared note `hub-data-offline.md`). Tests and the demo point the cache at
`evalsuite/fixtures/hub_cache`, a hub cache with the project's fixtures in each set's schema,
and read it through this same code.

The cache is `ARENA_EVALS_HUB_CACHE` when set, else huggingface_hub's own (`HF_HUB_CACHE`,
`HF_HOME`, `~/.cache/huggingface/hub`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "ARENA_EVALS_HUB_CACHE"
FIXTURE_CACHE = Path(__file__).resolve().parent / "fixtures" / "hub_cache"
FETCH_COMMAND = "python manage.py evals fetch"
TOKEN_ENV = "HF_TOKEN"
# A benchmark's split is at most tens of MB; a file past this is not one we pinned.
MAX_FILE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class HubSet:
    """One benchmark's data on the hub: repository, pinned commit, and the split's files."""

    repo_id: str
    revision: str  # a full commit hash, never a branch: the items must not move
    files: tuple[str, ...]  # glob patterns inside the repository, as laid out on the hub
    split: str  # the split these files hold (documentation and error messages)
    config: str = ""  # the data set's config name, where it has several

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision[:12]}"


@dataclass(frozen=True)
class PinnedFile:
    """A benchmark's data published as one file outside the hub (as inspect_evals reads GPQA
    and StrongREJECT), pinned by the URL's commit and/or the file's SHA-256. It is kept in the
    same cache under `files/<hash of the URL>/<file name>`; `fetch` checks the SHA-256."""

    url: str
    sha256: str  # of the file's bytes; "" when the URL itself names a commit
    split: str
    columns: tuple[str, ...] = ()  # a CSV/TSV without a header row: its columns

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def key(self) -> str:
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        pin = self.sha256[:12] or self.key
        return f"{self.name}@{pin}"

    def path(self, cache: Path) -> Path:
        return cache / "files" / self.key / self.name


@dataclass(frozen=True)
class PinnedFiles:
    """A set published as several pinned files (MGSM: one a language). Each row read says
    which file it came from, under `source_file`."""

    files: tuple[PinnedFile, ...]
    split: str

    @property
    def label(self) -> str:
        return f"{self.files[0].name}..{self.files[-1].name} ({len(self.files)} files)"


DataSource = HubSet | PinnedFile | PinnedFiles


class MissingDataset(LookupError):
    """A benchmark's pinned data set is not in the hub cache (or lacks its split's files)."""

    def __init__(self, benchmark: str, hub_set: DataSource, cache: Path, detail: str) -> None:
        self.benchmark = benchmark
        self.hub_set = hub_set
        super().__init__(
            f"benchmark {benchmark}: data set {hub_set.label} ({hub_set.split} split) is not in "
            f"the hub cache {cache}: {detail}. Run `{FETCH_COMMAND}` on a connected host "
            f"(with {CACHE_ENV} or HF_HUB_CACHE pointing at this cache)."
        )


class FetchFailed(RuntimeError):
    """A set could not be fetched; `reason` says which way: "gated" (the hub refuses it
    without a token of an account that accepted its terms), "missing" (no such repository,
    revision or file), "unreachable" (network or hub error), "mismatch" (not what was pinned)."""

    def __init__(self, message: str, *, reason: str = "mismatch") -> None:
        self.reason = reason
        super().__init__(message)


def token() -> str | None:
    """The hub token `evals fetch` sends (HF_TOKEN), for gated sets such as cais/MASK."""
    return os.environ.get(TOKEN_ENV) or None


def cache_dir() -> Path:
    """The hub cache the suite reads, decided when called (so a job inherits its caller's)."""
    configured = os.environ.get(CACHE_ENV, "")
    if configured:
        return Path(configured)
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def fetch(benchmark: str, hub_set: DataSource, *, cache: Path | None = None) -> list[Path]:
    """Download the split's files at the pinned revision into the hub cache (network)."""
    cache = cache or cache_dir()
    if isinstance(hub_set, PinnedFiles):
        return [_fetch_file(benchmark, pinned, cache) for pinned in hub_set.files]
    if isinstance(hub_set, PinnedFile):
        return [_fetch_file(benchmark, hub_set, cache)]
    try:
        folder = _snapshot_download(hub_set, cache, offline=False)
    except Exception as error:
        raise _fetch_failed(benchmark, hub_set, error) from error
    try:
        return split_files(benchmark, hub_set, folder, cache)
    except MissingDataset as missing:
        raise FetchFailed(
            f"benchmark {benchmark}: {hub_set.label} has no file matching "
            f"{', '.join(hub_set.files)} ({missing})",
            reason="missing",
        ) from None


def _fetch_failed(benchmark: str, hub_set: HubSet, error: Exception) -> FetchFailed:
    """The hub client's error as a FetchFailed that says whether the set is gated, missing or
    out of reach (GatedRepoError is a RepositoryNotFoundError: it is asked first)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"benchmark {benchmark}: {hub_set.label}"
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, GatedRepoError):
        return FetchFailed(
            f"{where} is gated: accept its terms on the hub with an account and set "
            f"{TOKEN_ENV} to a token of that account ({first})",
            reason="gated",
        )
    if isinstance(error, RevisionNotFoundError):
        return FetchFailed(f"{where}: the hub has no such revision ({first})", reason="missing")
    if isinstance(error, RepositoryNotFoundError):
        return FetchFailed(f"{where}: the hub has no such repository ({first})", reason="missing")
    if isinstance(error, RemoteEntryNotFoundError):
        return FetchFailed(f"{where}: a file is not on the hub ({first})", reason="missing")
    return FetchFailed(
        f"{where}: the hub could not be reached ({type(error).__name__}: {first})",
        reason="unreachable",
    )


def snapshot(benchmark: str, hub_set: HubSet, *, cache: Path | None = None) -> Path:
    """The cached snapshot folder of the pinned revision, resolved without the network."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = cache or cache_dir()
    try:
        return _snapshot_download(hub_set, cache, offline=True)
    except LocalEntryNotFoundError:
        raise MissingDataset(benchmark, hub_set, cache, "no snapshot of that revision") from None


def _snapshot_download(hub_set: HubSet, cache: Path, *, offline: bool) -> Path:
    from huggingface_hub import snapshot_download

    folder = snapshot_download(
        hub_set.repo_id,
        repo_type="dataset",
        revision=hub_set.revision,
        allow_patterns=list(hub_set.files),
        cache_dir=str(cache),
        local_files_only=offline,
        token=None if offline else token(),
    )
    return Path(folder)


def split_files(benchmark: str, hub_set: HubSet, folder: Path, cache: Path) -> list[Path]:
    """The snapshot's files for the split, in order; every pattern must match something."""
    found: list[Path] = []
    for pattern in hub_set.files:
        matches = sorted(p for p in folder.glob(pattern) if p.is_file())
        if not matches:
            raise MissingDataset(benchmark, hub_set, cache, f"no file matches {pattern!r}")
        found += matches
    return found


def require(benchmark: str, hub_set: DataSource, *, cache: Path | None = None) -> list[Path]:
    """Check, offline, that the set is in the cache; its files (raises `MissingDataset`)."""
    cache = cache or cache_dir()
    if isinstance(hub_set, PinnedFile | PinnedFiles):
        files = hub_set.files if isinstance(hub_set, PinnedFiles) else (hub_set,)
        for pinned in files:
            if not pinned.path(cache).is_file():
                raise MissingDataset(benchmark, hub_set, cache, f"no file {pinned.path(cache)}")
        return [pinned.path(cache) for pinned in files]
    return split_files(benchmark, hub_set, snapshot(benchmark, hub_set, cache=cache), cache)


def records(
    benchmark: str, hub_set: DataSource, *, cache: Path | None = None
) -> list[dict[str, Any]]:
    """Every row of the split, as the hub's own schema has it (offline), with the file it came
    from under `source_file` (a hub set's path in its repository: MASK's archetype is its
    config folder)."""
    if isinstance(hub_set, HubSet):
        cache = cache or cache_dir()
        folder = snapshot(benchmark, hub_set, cache=cache)
        return [
            {**row, "source_file": path.relative_to(folder).as_posix()}
            for path in split_files(benchmark, hub_set, folder, cache)
            for row in read_rows(path)
        ]
    paths = require(benchmark, hub_set, cache=cache)
    if isinstance(hub_set, PinnedFiles):
        return [
            {**row, "source_file": pinned.name}
            for pinned, path in zip(hub_set.files, paths, strict=True)
            for row in read_rows(path, columns=pinned.columns)
        ]
    return [row for path in paths for row in read_rows(path, columns=hub_set.columns)]


def records_by_file(
    benchmark: str, hub_set: HubSet, *, cache: Path | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every row of the split, by the file it comes from (its path in the repository), for a
    set whose rows do not say which of its configs they belong to (BBH) (offline)."""
    cache = cache or cache_dir()
    folder = snapshot(benchmark, hub_set, cache=cache)
    return {
        path.relative_to(folder).as_posix(): read_rows(path)
        for path in split_files(benchmark, hub_set, folder, cache)
    }


def _fetch_file(benchmark: str, pinned: PinnedFile, cache: Path) -> Path:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(pinned.url, timeout=120) as response:  # noqa: S310 (pinned https)
            body = response.read(MAX_FILE_BYTES + 1)
    except urllib.error.HTTPError as error:
        reason = "missing" if error.code in (404, 410) else "unreachable"
        raise FetchFailed(f"benchmark {benchmark}: {pinned.url}: {error}", reason=reason) from None
    except OSError as error:  # URLError, timeouts, refused connections
        raise FetchFailed(
            f"benchmark {benchmark}: {pinned.url} could not be reached ({error})",
            reason="unreachable",
        ) from None
    if len(body) > MAX_FILE_BYTES:
        raise FetchFailed(f"benchmark {benchmark}: {pinned.url} is larger than any pinned split")
    digest = hashlib.sha256(body).hexdigest()
    if pinned.sha256 and digest != pinned.sha256:
        raise FetchFailed(
            f"benchmark {benchmark}: {pinned.url} has SHA-256 {digest}, not the pinned "
            f"{pinned.sha256}: the published file changed"
        )
    target = pinned.path(cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(body)
    partial.replace(target)
    return target


def read_rows(path: Path, *, columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows of one data file: Parquet, JSON Lines, JSON (a list of rows), CSV or TSV (with a
    header row, or the given `columns`)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path} is {size} bytes, more than any pinned split")
    name = path.name
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if name.endswith(".json"):
        loaded = json.loads(text)
        if not isinstance(loaded, list):
            raise ValueError(f"{path}: expected a list of rows")
        return loaded
    if name.endswith((".csv", ".tsv")):
        delimiter = "\t" if name.endswith(".tsv") else ","
        reader = csv.DictReader(
            io.StringIO(text), fieldnames=list(columns) or None, delimiter=delimiter
        )
        return list(reader)
    raise ValueError(f"{path}: no reader for this file format")
