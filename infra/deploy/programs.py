"""The programs the kit supervises: supervisord's configuration and control, and finding this
kit's programs by pid when their supervisor is gone."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from infra.deploy.layout import (
    DEPLOY_ID_VARIABLE,
    PHASES_PROGRAM,
    ROOT,
    SYNC_PROGRAM,
    Layout,
)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and pid_alive(pid) else None


def _supervisor_escape(value: str) -> str:
    return value.replace("%", "%%")


def supervisor_config(layout: Layout, *, workers: int, python: str, sync_every: int) -> str:
    """supervisord.conf: N web workers (group `web`), the phase worker and the sync."""
    logs = layout.logs
    programs: list[str] = []

    def program(name: str, command: list[str], extra: str = "") -> None:
        programs.append(
            f"""
[program:{name}]
command={_supervisor_escape(shlex.join(command))}
directory={_supervisor_escape(str(ROOT))}
autostart=true
autorestart=true
startsecs=1
startretries=1000
stopsignal=TERM
stopwaitsecs=15
redirect_stderr=true
stdout_logfile={_supervisor_escape(str(logs / name))}.log
stdout_logfile_maxbytes=20MB
stdout_logfile_backups=2
{extra}"""
        )

    web = [f"web-{index}" for index in range(workers)]
    for index, name in enumerate(web):
        # lockfile=1: a socket left by a worker killed with -9 is removed on restart.
        endpoint = f"unix:{layout.worker_socket(index)}:lockfile=1:mode=666"
        # -v 0: no access log of daphne's own; nginx's has every request, with the client.
        program(
            name,
            [python, "-m", "daphne", "-v", "0", "--endpoint", endpoint, "arena.asgi:application"],
        )
    # Agent runs' keepers outlive a restart of the phase worker (agents/runs/README.md): only
    # the worker itself is signalled, as systemd's KillMode=process.
    program(
        PHASES_PROGRAM,
        [python, "manage.py", "phases", "run"],
        "stopasgroup=false\nkillasgroup=false\n",
    )
    program(SYNC_PROGRAM, [python, "manage.py", "cluster", "sync", "--every", str(sync_every)])
    socket = _supervisor_escape(str(layout.supervisor_socket))
    return f"""\
; Written by infra/deploy/up; rewritten on each start.
[unix_http_server]
file={socket}
chmod=0700

[supervisord]
pidfile={_supervisor_escape(str(layout.supervisor_pid_file))}
logfile={_supervisor_escape(str(logs / "supervisord.log"))}
logfile_maxbytes=20MB
childlogdir={_supervisor_escape(str(logs))}
directory={_supervisor_escape(str(ROOT))}
minfds=16384
identifier=rsi-arena-{layout.public_dir.name}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{socket}

[group:web]
programs={",".join(web)}
{"".join(programs)}"""


def supervisorctl(
    layout: Layout, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["supervisorctl", "-c", str(layout.supervisor_config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def program_states(layout: Layout) -> dict[str, tuple[str, int | None]]:
    """Each program's supervisor state and pid: {"web:web-0": ("RUNNING", 1234), ...}."""
    status = supervisorctl(layout, "status")
    states: dict[str, tuple[str, int | None]] = {}
    for line in status.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        pid_match = re.search(r"\bpid (\d+),", line)
        states[parts[0]] = (parts[1], int(pid_match.group(1)) if pid_match else None)
    return states


def _is_our_program(command: str) -> bool:
    return "-m daphne" in command or any(
        f"manage.py {program}" in command for program in ("phases run", "cluster sync")
    )


def leftover_programs(layout: Layout) -> list[int]:
    """This kit's programs still running without their supervisor (it was killed): found by
    the marker in their environment and their command line, never by a name alone. Agent
    runs' keepers, which inherit the marker from the phase worker, are not among them."""
    marker = f"{DEPLOY_ID_VARIABLE}={layout.public_dir.name}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if marker in environ and _is_our_program(command) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found
