"""Every call the platform makes to Slurm goes through this module.

Slurm is driven through its command-line tools with machine-readable output (`--parsable`,
`-P`, `-n`): there is no Python binding that matches the Slurm release on these machines
(see shared/notes/slurm.md). Tests and the real backend patch nothing here: they run it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0


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
    With `clean_env`, the command sees only `env`, not this process's environment."""
    argv = list(command)
    if user is not None and user != _current_user():
        argv = ["runuser", "-u", user, "--", *argv]
    completed = subprocess.run(
        argv,
        input=input_text,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(env or {}) if clean_env else {**os.environ, **(env or {})},
        timeout=timeout_s,
        check=False,
    )
    if check and completed.returncode != 0:
        raise SlurmError(command, completed.returncode, completed.stderr or completed.stdout)
    return Result(completed.stdout, completed.stderr)


def parsable_rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of `-P -n` output (`|`-separated, no header) as dicts keyed by `fields`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        rows.append(dict(zip(fields, values, strict=False)))
    return rows


def sacctmgr(*args: str, check: bool = True) -> Result:
    return run(["sacctmgr", "-i", *args], check=check)


def sacctmgr_rows(entity: str, fields: Sequence[str], *where: str) -> list[dict[str, str]]:
    command = ["sacctmgr", "-n", "-P", "show", entity]
    if where:
        command += ["where", *where]
    command.append("format=" + ",".join(fields))
    return parsable_rows(run(command).stdout, fields)


def sacct_rows(fields: Sequence[str], *args: str) -> list[dict[str, str]]:
    result = run(["sacct", "-n", "-P", "-o", ",".join(fields), *args])
    return parsable_rows(result.stdout, fields)


def squeue_rows(fields: dict[str, str], *args: str) -> list[dict[str, str]]:
    """`fields` maps names to squeue format codes (e.g. {"id": "%i", "state": "%T"})."""
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
