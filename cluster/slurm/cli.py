"""Every call the platform makes to Slurm goes through this module.

Slurm is driven through its command-line tools with machine-readable output (`--parsable`,
`-P`, `-n`): there is no Python binding that matches the Slurm release on these machines
(see shared/notes/slurm.md). Tests and the real backend patch nothing here: they run it.

Slurm 22.05 prints text a user wrote (job names, working directories, comments) unescaped in
its delimited output, and such text may hold `|`, newlines and any control character a
`--delimiter` could pick. So delimited output (`parsable_rows`) is read only for fields Slurm
or the platform writes, and a user's text comes from `--json` (`sacct_job_texts`,
`squeue_job_names`), where every string is escaped.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.as_user import as_user

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0


class SlurmOutputError(RuntimeError):
    """Slurm's output is not in the shape the platform reads: refused, never guessed at."""


class SlurmError(RuntimeError):
    """A Slurm command failed; `stderr` holds Slurm's own words."""

    def __init__(self, command: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"{command[0]} exited with {returncode}: {stderr.strip()}")
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr.strip()


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str


def run(
    command: Sequence[str],
    *,
    user: str | None = None,
    input_text: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    clean_env: bool = False,
    check: bool = True,
    timeout_s: float = TIMEOUT_S,
) -> Result:
    """Run a Slurm command, as `user` (via runuser, so Slurm sees that Unix user) if given.
    With `clean_env`, the command sees only `env`, not this process's environment.

    As another user the command is that user's to read (`/proc/PID/environ`, and it can
    SIGSTOP it), so it always gets a login's environment and `env`, never this process's:
    `cluster.as_user`."""
    argv = list(command)
    environment = dict(env or {}) if clean_env else {**os.environ, **(env or {})}
    if user is not None and user != _current_user():
        started = as_user(user, argv, env=env)
        argv, environment = started.argv, started.env
    completed = subprocess.run(
        argv,
        input=input_text,
        capture_output=True,
        # Job names may hold bytes that are not UTF-8 (squeue passes them through raw): one
        # such name must not make every read of the queue fail.
        encoding="utf-8",
        errors="replace",
        cwd=cwd,
        env=environment,
        timeout=timeout_s,
        check=False,
    )
    if check and completed.returncode != 0:
        raise SlurmError(command, completed.returncode, completed.stderr or completed.stdout)
    return Result(completed.stdout, completed.stderr)


def parsable_rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of `-P -n` output (`|`-separated, no header) as dicts keyed by `fields`.

    Only for fields that Slurm or the platform writes (ids, states, accounts, TRES, times):
    a user's text can hold the separator and newlines (see the module's docstring). A line
    with another number of fields is refused, never read as a row."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(fields):
            raise SlurmOutputError(
                f"expected {len(fields)} |-separated fields ({','.join(fields)}), got "
                f"{len(values)}: {line[:200]!r}"
            )
        rows.append(dict(zip(fields, values, strict=True)))
    return rows


def json_output(command: Sequence[str]) -> dict[str, Any]:
    """`command --json`: Slurm's own JSON, in which every string is escaped."""
    text = run([*command, "--json"]).stdout
    try:
        # strict=False: a raw control character inside a string is read, not refused.
        data = json.loads(text, strict=False)
    except ValueError as error:
        raise SlurmOutputError(f"{command[0]} --json: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        raise SlurmOutputError(f"{command[0]} --json: no list of jobs")
    return data


@dataclass(frozen=True)
class JobText:
    """What a job's submitter wrote freely, read from JSON and never out of delimited text."""

    name: str
    workdir: str


def sacct_job_texts(*args: str) -> dict[str, JobText]:
    """Each job's name and working directory from `sacct --json` (same filters as `args`),
    keyed by the raw job id; for a job that ran several times, those of its first run."""
    texts: dict[str, JobText] = {}
    for job in json_output(["sacct", *args]).get("jobs", []):
        if isinstance(job, dict) and job.get("job_id") is not None:
            texts.setdefault(
                str(job["job_id"]),
                JobText(_string(job.get("name")), _string(job.get("working_directory"))),
            )
    return texts


def squeue_job_names(*args: str) -> dict[str, str]:
    """Each job's name from `squeue --json`, keyed by its job id."""
    return {
        str(job["job_id"]): _string(job.get("name"))
        for job in json_output(["squeue", *args]).get("jobs", [])
        if isinstance(job, dict) and job.get("job_id") is not None
    }


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


# sacctmgr's verbs that change slurmdbd's accounting records.
_ACCOUNTING_WRITES = frozenset({"add", "create", "modify", "update", "delete", "remove", "load"})
LOCK_WAIT_S = 2 * TIMEOUT_S


def sacctmgr(*args: str, check: bool = True) -> Result:
    """`sacctmgr -i ARGS`. A change runs under the host's accounting lock, one at a time:
    slurmdbd 22.05 keeps associations as a nested set (lft/rgt), and changes sent at once by
    several processes (web workers provisioning agents, the phase engine opening a phase)
    deadlock in MariaDB and, retried, corrupt it. Seen here with four writers: user
    associations lost ("Nothing new added" for one that does not exist), one agent's user
    association inside another's account, so blocking that account blocked both and left
    the other's own user open, and slurmdbd exiting on a deadlock it could not resolve."""
    command = ["sacctmgr", "-i", *args]
    if args and args[0].lower() in _ACCOUNTING_WRITES:
        with accounting_write_lock():
            return run(command, check=check)
    return run(command, check=check)


@contextmanager
def accounting_write_lock(timeout_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the host's lock on Slurm accounting changes (`CLUSTER_SLURM_ACCOUNTING_LOCK`).
    Its folder must be the platform's own: a lock file an agent could create or replace
    would let it stall every account change."""
    from django.conf import settings

    path = Path(settings.CLUSTER_SLURM_ACCOUNTING_LOCK)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = path.parent.lstat()
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.getuid() or folder.st_mode & 0o022:
        raise SlurmError(
            ["sacctmgr"], 1,
            f"the accounting lock's folder {path.parent} is not this user's own (owner, no "
            "group or other write): refusing to lock through it",
        )  # fmt: skip
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SlurmError(
                        ["sacctmgr"], 1,
                        f"another process held the accounting lock {path} for {timeout_s:.0f} s",
                    ) from None  # fmt: skip
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def sacctmgr_rows(entity: str, fields: Sequence[str], *where: str) -> list[dict[str, str]]:
    command = ["sacctmgr", "-n", "-P", "show", entity]
    if where:
        command += ["where", *where]
    command.append("format=" + ",".join(fields))
    return parsable_rows(run(command).stdout, fields)


def sacct_rows(fields: Sequence[str], *args: str) -> list[dict[str, str]]:
    """`sacct -P` rows: never ask it for JobName, WorkDir, Comment or other user text."""
    result = run(["sacct", "-n", "-P", "-o", ",".join(fields), *args])
    return parsable_rows(result.stdout, fields)


def squeue_rows(fields: dict[str, str], *args: str) -> list[dict[str, str]]:
    """`fields` maps names to squeue format codes (e.g. {"id": "%i", "state": "%T"}); never
    `%j`, `%Z`, `%k` or other user text (`squeue_job_names` reads names)."""
    result = run(["squeue", "-h", "-o", "|".join(fields.values()), *args])
    return parsable_rows(result.stdout, list(fields))


def scontrol(*args: str, check: bool = True) -> Result:
    return run(["scontrol", *args], check=check)


# A key starts a `Key=` token at the start of the line or after a space; its value runs to the
# next one, so values with spaces (`OS=Linux 6.1.0 #1 SMP`, `Reason=Not responding`) survive.
_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:.]*)=")


def key_values(line: str) -> dict[str, str]:
    """One record of `scontrol show ... -o` (`Key=Value Key=Value ...`) as a dict."""
    keys = list(_KEY.finditer(line))
    record = {}
    for this, following in zip(keys, [*keys[1:], None], strict=True):
        end = following.start() if following is not None else len(line)
        record[this.group(1)] = line[this.end() : end].strip()
    return record


def assoc_mgr_account_record(account: str) -> str:
    """slurmctld's own copy of the account's association (`scontrol show assoc_mgr`), as
    text, or "" when the controller has none: what it enforces now, which sacctmgr's changes
    reach a moment after slurmdbd has them."""
    return assoc_mgr_records(account).get("", "")


def assoc_mgr_records(account: str) -> dict[str, str]:
    """slurmctld's own copies of the account's associations, as text, keyed by user name
    ("" for the account's own). A job is judged against its user's association, which
    holds the limits it inherits from the account."""
    text = scontrol("show", "assoc_mgr", f"accounts={account}", "flags=assoc").stdout
    records = {}
    for record in text.split("ClusterName=")[1:]:
        found = re.match(r"\S+ Account=(\S+) UserName=(\S*)", record)
        if found and found.group(1) == account:
            records[found.group(2).split("(")[0]] = record
    return records


def scontrol_records(*args: str) -> list[dict[str, str]]:
    """`scontrol show <entity> -o`: one record per line."""
    text = run(["scontrol", "show", *args, "-o"]).stdout
    return [key_values(line) for line in text.splitlines() if line.strip()]


def available() -> bool:
    """Is a Slurm controller answering?"""
    try:
        return "UP" in run(["scontrol", "ping"], check=False, timeout_s=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
