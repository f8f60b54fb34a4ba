"""The deployment kit up on the test database: nginx, two daphne workers, the phase worker and
the sync under supervisord, exactly as `infra/deploy/up` starts them (infra/deploy/README.md)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from django.conf import settings
from django.contrib.sessions.models import Session

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "infra" / "deploy"
# Battles a minute from one network, low so that the limit is reached in a few requests.
BATTLES_PER_NETWORK = 3
# A network the voting site is closed to (frontend/middleware.py).
DENIED_CLIENT = "127.0.0.9"


@dataclass(frozen=True)
class DeployedArena:
    url: str
    deploy_dir: Path
    state: dict
    env: dict[str, str]

    def kit(self, command: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(KIT / command), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def program_pid(self, program: str) -> int | None:
        """The pid the supervisor reports for `program` (e.g. web:web-0); None unless running."""
        reply = self.kit("ctl", "pid", program, timeout=30)
        pid = reply.stdout.strip()
        return int(pid) if pid.isdigit() and int(pid) > 0 else None

    def client(self, address: str = "127.0.0.1", **headers: str) -> httpx2.Client:
        """A client connecting from `address` (any 127.0.0.0/8 address is this machine)."""
        return httpx2.Client(
            base_url=self.url,
            transport=httpx2.HTTPTransport(local_address=address),
            headers=headers,
            timeout=60,
        )


def database_url() -> str:
    db = settings.DATABASES["default"]
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{db.get('HOST') or ''}{port}/{quote(db['NAME'])}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def deployed_arena(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DeployedArena]:
    deploy_dir = tmp_path_factory.mktemp("deploy")
    port = free_port()
    env = {
        **os.environ,
        "ARENA_PYTHON": sys.executable,
        "ARENA_DEPLOY_DIR": str(deploy_dir),
        "DATABASE_URL": database_url(),
        "ARENA_BATTLES_PER_MINUTE": "1000",
        "ARENA_BATTLES_PER_MINUTE_PER_IP": str(BATTLES_PER_NETWORK),
        "ARENA_MIN_VOTE_SECONDS": "0",
        "ARENA_VOTING_DENIED_NETWORKS": f"{DENIED_CLIENT}/32",
        "CLUSTER_BACKEND": "local",
    }
    env.pop("ARENA_TRUSTED_PROXIES", None)  # the kit's default: nginx's
    started = time.monotonic()
    up = subprocess.run(
        [str(KIT / "up"), "--workers", "2", "--port", str(port), "--no-migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(f"[deploy] up took {time.monotonic() - started:.1f} s\n{up.stdout}{up.stderr}")
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((deploy_dir / "state.json").read_text())
    arena = DeployedArena(url=state["url"], deploy_dir=deploy_dir, state=state, env=env)
    yield arena
    down = arena.kit("down")
    assert down.returncode == 0, down.stdout + down.stderr


def arrive(client: httpx2.Client) -> str:
    """Load the arena page as a voter does; returns the voter id kept in the session."""
    client.get("/").raise_for_status()
    session = Session.objects.get(session_key=client.cookies["sessionid"])
    return session.get_decoded()["arena_voter"]


def post_json(client: httpx2.Client, path: str, body: dict) -> httpx2.Response:
    return client.post(
        path,
        json=body,
        headers={
            "X-CSRFToken": client.cookies.get("csrftoken") or "",
            "Referer": str(client.base_url).rstrip("/") + "/",
        },
    )
