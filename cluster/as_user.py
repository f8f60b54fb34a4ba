"""The one way the platform starts a process as another Unix user: an agent's, or `nobody`.

A process that runs as the agent's uid is the agent's to read. From its first instruction as
that user its `/proc/PID/environ` is readable by every other process of the agent (a
background job left by an earlier tool call polls new pids), and that file shows the
environment the process was *born* with at its exec, whatever it later unsets: an
`env -i …` it runs cleans only the program after it. So the environment is chosen here, before
the uid changes: `as_user` gives the argv and the whole environment to hand to `Popen` as
`env=`, made of a login's variables and the caller's own (the agent's tokens, its PATH), never
the platform's (its database URL, the scaffold's token, the judges' keys, `HF_*`).

Values never go on the command line (`env K=V …`): every user on the host reads argv.

Standard library only: the keeper, which never loads Django, uses it.
"""

from __future__ import annotations

import pwd
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
# Where runuser and setpriv are looked for (not in the caller's PATH, which is the caller's).
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class AsUser:
    """What to start: `subprocess.Popen(started.argv, env=started.env, …)`, both together."""

    argv: list[str]
    env: dict[str, str]


def login_environment(user: str) -> dict[str, str]:
    """What a fresh login of `user` would have, give or take their shell's profile."""
    entry = pwd.getpwnam(user)
    return {
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": entry.pw_shell or "/bin/bash",
        "PATH": LOGIN_PATH,
        "LANG": "C.UTF-8",
    }


def as_user(
    user: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    keep_descriptors: bool = False,
) -> AsUser:
    """`argv` as `user`, with a login's environment and `env` over it, and nothing else.

    `runuser` by default (it sets HOME, USER and LOGNAME from the password file, as the login
    environment does). `keep_descriptors`: `setpriv`, which opens no PAM session and so keeps
    every descriptor the caller passes, an `O_PATH` one included."""
    environment = {**login_environment(user), **(env or {})}
    if keep_descriptors:
        entry = pwd.getpwnam(user)
        switch = [
            _tool("setpriv"),
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--init-groups",
        ]
    else:
        switch = [_tool("runuser"), "-u", user]
    return AsUser(argv=[*switch, "--", *argv], env=environment)


def _tool(name: str) -> str:
    return shutil.which(name, path=SYSTEM_PATH) or name
