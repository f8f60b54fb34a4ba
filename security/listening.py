"""The TCP ports this machine's platform site really listens on, read from the kernel's socket
table (psutil reads /proc/net/tcp and tcp6, and each socket's process).

The site is nginx (the deployment kit's, started from the checkout, or the system's in
production) and the ASGI servers that run the arena (daphne, uvicorn, gunicorn, `manage.py
demo` or `runserver`) from this checkout. Another checkout's processes on the same machine are
another deployment's (a second kit, a test run) and are left to that one's check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

ASGI_SERVERS = {"daphne", "uvicorn", "gunicorn"}
SITE_COMMANDS = {"demo", "runserver"}  # manage.py subcommands that serve the site


@dataclass(frozen=True)
class Listener:
    port: int
    program: str  # "nginx (pid 123)", for the report


def site_listeners(checkout: Path) -> list[Listener]:
    """One per listening port of the site's processes (run as root to see every process's)."""
    found: dict[int, Listener] = {}
    for connection in psutil.net_connections(kind="tcp"):
        if connection.status != psutil.CONN_LISTEN or connection.pid is None:
            continue
        port = connection.laddr.port
        if port in found:
            continue
        try:
            process = psutil.Process(connection.pid)
            name, command = process.name(), process.cmdline()
        except psutil.Error:  # gone meanwhile
            continue
        if _is_site(process, name, command, checkout):
            found[port] = Listener(port, f"{name} (pid {connection.pid})")
    return sorted(found.values(), key=lambda listener: listener.port)


def _is_site(process: psutil.Process, name: str, command: list[str], checkout: Path) -> bool:
    words = {os.path.basename(part) for part in command}
    manage = "manage.py" in words and bool(SITE_COMMANDS & set(command))
    if name != "nginx" and not (ASGI_SERVERS & words) and not manage:
        return False
    try:
        cwd = Path(process.cwd())
    except psutil.AccessDenied:
        return True  # not ours to tell apart: counted, so a site is never missed
    except psutil.Error:
        return False
    # The system's nginx (production's front) runs from /; the kit's from the checkout.
    return cwd == checkout.resolve() or (name == "nginx" and cwd == Path("/"))
