"""Issue 12, item 13: agents' Unix users reach the platform's own services directly.

Played by a real agent user (`runuser`) against what listens on this machine: PostgreSQL,
Redis, MariaDB, slurmdbd, a model server port and the voters' site port. Before: every one of
them answered the agent, which could then read the database, publish into the channel layer,
or ask a contestant's model who it is. After: the kernel's packet filter (infra/firewall/)
refuses an agent's connections to those ports, while the agent gateway (the agent API and the
proxy, nothing else) and slurmctld stay reachable, and other users are unaffected.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.core.management import call_command

from agents.firewall import firewall_from_settings
from agents.services import agent_deprovision
from tests.conftest import ROOT, TEST_LOG_DIR, _database_url_for_subprocess, _free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLURMCTLD_PORT = 6817
# Connect from the agent's own shell with the sandbox's python3: refused, or connected.
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except ConnectionRefusedError:
    print("refused")
except OSError as other:
    print(f"other: {other}")
"""


def reach_as(user: str, port: int, host: str = "127.0.0.1") -> str:
    done = subprocess.run(
        ["runuser", "-u", user, "--", "python3", "-c", PROBE, host, str(port)],
        cwd="/", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.stdout.strip() or done.stderr.strip()


@contextmanager
def listening(port: int, host: str = "127.0.0.1") -> Iterator[None]:
    """Something answers on host:port for the block: what is there already, or a throwaway
    listener root starts (the site or a model server may not be running during the test)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
        yield
        return
    except OSError:
        pass
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(16)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        server.close()


def _platform_ports() -> list[tuple[str, int]]:
    return [
        ("postgresql", 5432),
        ("redis", 6379),
        ("mariadb", 3306),
        ("slurmdbd", 6819),
        ("model-server-first", settings.ARENA_SERVING_BASE_PORT),
        ("model-server-last", settings.ARENA_SERVING_BASE_PORT + 99),
        ("voters-site", 8000),
    ]


@pytest.fixture
def trudy(players, settings):
    settings.AGENTS_FIREWALL = "nftables"
    return players("sec_ports_trudy")


@pytest.mark.parametrize("service,port", _platform_ports(), ids=[s for s, _ in _platform_ports()])
def test_an_agent_cannot_reach_the_platforms_ports(trudy, service, port):
    with listening(port):
        assert reach_as("nobody", port) == "connected", f"{service} must answer other users"
        assert reach_as(trudy.user, port) == "refused", f"the agent reached {service} on {port}"


# Issue 25, finding 10: the deployment kit's nginx serves voters on 8080 (`infra/deploy/up`),
# production's on 80 and 443; the defaults closed only the demo's 8000.
@pytest.mark.parametrize("port", [8080, 80, 443])
def test_an_agent_cannot_reach_the_deploy_kits_voting_ports(trudy, port):
    with listening(port):
        assert reach_as("nobody", port) == "connected", f"{port} must answer other users"
        assert reach_as(trudy.user, port) == "refused", f"the agent reached the site on {port}"


def test_the_host_address_and_ipv6_loopback_are_covered_too(trudy):
    with listening(5432):
        for host in ("127.0.0.2", socket.gethostbyname(socket.gethostname())):
            assert reach_as(trudy.user, 5432, host) == "refused", host
    with listening(6379, host="::1"):
        assert reach_as("nobody", 6379, "::1") == "connected"
        assert reach_as(trudy.user, 6379, "::1") == "refused"


def test_an_agent_cannot_reach_the_databases_through_their_unix_sockets(trudy):
    """The packet filter sees TCP only. On these machines PostgreSQL trusts every local socket
    connection and MariaDB's root has no password on its socket: both are superusers."""
    postgres = trudy.shell(
        "PGCONNECT_TIMEOUT=5 psql -h /var/run/postgresql -U postgres -d postgres -Atc 'select 1'"
    )
    assert postgres.returncode != 0, "the agent is PostgreSQL's superuser over its socket"
    mariadb = trudy.shell("mysql --connect-timeout=5 -u root -e 'select 1'")
    assert mariadb.returncode != 0, "the agent is MariaDB's root over its socket"


def test_the_gateway_slurmctld_and_other_ports_stay_reachable(trudy):
    gateway = settings.AGENTS_GATEWAY_PORT
    # A test's live arena runs on a free port; agents call it and must keep reaching it.
    other = _free_port()
    for port in (gateway, SLURMCTLD_PORT, other):
        with listening(port):
            assert reach_as(trudy.user, port) == "connected", port


def test_an_agent_still_submits_with_plain_sbatch(trudy):
    account = trudy.provisioned.agent.cluster_account
    done = trudy.shell(f"sbatch --parsable --account={account} -t 1 --wrap true")
    assert done.returncode == 0, done.stderr
    subprocess.run(["scancel", done.stdout.strip().split(";")[0]], check=False)


# Serial: it deletes and reinstalls the machine's one nftables table, in which every worker's
# agents are blocked.
@pytest.mark.serial
def test_deprovisioning_takes_the_uid_out_and_reinstalling_puts_active_agents_back(
    players, sandboxes, slurm, settings
):
    settings.AGENTS_FIREWALL = "nftables"
    trudy = players("sec_ports_trudy")
    gone = players("sec_ports_gone")
    gone_uid = gone.uid
    agent_deprovision(name="sec_ports_gone", sandboxes=sandboxes, backend=slurm)
    firewall = firewall_from_settings()
    assert gone_uid not in firewall.state().uids

    # After a reboot the kernel has no rules: reinstalling fills the set from the database.
    subprocess.run(["nft", "delete", "table", "inet", "rsi_arena"], check=True)
    with listening(5432):
        assert reach_as(trudy.user, 5432) == "connected"
        call_command("security", "firewall")
        assert reach_as(trudy.user, 5432) == "refused"
    assert trudy.uid in firewall.state().uids


@dataclass(frozen=True)
class TwoPorts:
    site: str
    gateway: str
    gateway_port: int


@pytest.fixture
def two_ports(transactional_db) -> Iterator[TwoPorts]:
    """The arena as daphne serves it in the demo: one process listening on the voters' port
    and on the agents' gateway port."""
    site, gateway = _free_port(), _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "AGENTS_GATEWAY_PORT": str(gateway),
    }
    TEST_LOG_DIR.mkdir(parents=True, exist_ok=True)
    with (TEST_LOG_DIR / "daphne-gateway.log").open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "daphne",
                "-e", f"tcp:port={site}:interface=127.0.0.1",
                "-e", f"tcp:port={gateway}:interface=127.0.0.1",
                "arena.asgi:application",
            ],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        for port in (site, gateway):
            while True:
                assert process.poll() is None, "daphne exited; see var/test-logs"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"daphne never listened on {port}"
                    time.sleep(0.2)
        yield TwoPorts(f"http://127.0.0.1:{site}", f"http://127.0.0.1:{gateway}", gateway)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _status(url: str) -> int:
    import httpx

    return httpx.get(url, timeout=30, follow_redirects=False).status_code


def _websocket_status(port: int, path: str) -> int:
    """The HTTP status daphne answers a WebSocket upgrade with (101: accepted)."""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{port}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(request.encode())
        head = connection.recv(4096).decode(errors="replace")
    return int(head.split()[1]) if head.startswith("HTTP/") else 0


def test_the_gateway_port_answers_only_the_agent_api_and_the_proxy(two_ports):
    assert _status(f"{two_ports.gateway}/api/v1/openapi.json") == 200
    assert _status(f"{two_ports.gateway}/proxy/v1/models") == 401  # there, but wants a token
    for path in ("/", "/leaderboard/", "/admin/", "/admin/login/", "/static/x.css", "/api"):
        assert _status(f"{two_ports.gateway}{path}") == 404, path
    # The voters' port is the whole site, as before.
    assert _status(f"{two_ports.site}/") == 200
    assert _status(f"{two_ports.site}/api/v1/openapi.json") == 200


def test_the_gateway_port_refuses_websockets(two_ports):
    site_port = int(two_ports.site.rsplit(":", 1)[1])
    assert _websocket_status(site_port, "/ws/leaderboard/") == 101
    assert _websocket_status(two_ports.gateway_port, "/ws/leaderboard/") != 101


def _gateway_request(base: str, method: str, path: str, headers: dict[str, str]) -> int:
    import httpx

    return httpx.request(
        method, f"{base}{path}", headers=headers, timeout=30, follow_redirects=False
    ).status_code


@pytest.mark.parametrize(
    "method,path,headers",
    [
        # Daphne copies a client's Daphne-Root-Path into scope["root_path"]; Django then routes
        # on the path with that prefix cut off, while request.path keeps it.
        ("GET", "/api/admin/", {"Daphne-Root-Path": "/api"}),
        ("GET", "/api/admin/login/", {"Daphne-Root-Path": "/api"}),
        ("GET", "/proxy/organizer/", {"Daphne-Root-Path": "/proxy"}),
        ("GET", "/api/leaderboard/", {"Daphne-Root-Path": "/api"}),
        ("GET", "/api/v1/admin/", {"Daphne-Root-Path": "/api/v1"}),
        # The voters' own endpoints live under /api/ too: an agent must not start battles.
        ("POST", "/api/battles", {}),
        ("POST", "/api/battles/x/vote", {}),
        ("GET", "/api/prompts/suggest", {}),
        ("GET", "/api/leaderboard", {}),
    ],
    ids=lambda value: value if isinstance(value, str) else ",".join(value) or "-",
)
def test_the_gateway_cannot_be_bypassed_with_a_root_path_or_the_voters_api(
    two_ports, method, path, headers
):
    assert _gateway_request(two_ports.gateway, method, path, headers) == 404


def test_the_gateway_still_answers_the_agent_api_with_a_root_path_header(two_ports):
    # A root path the client sets is ignored on the gateway: the agent API still answers.
    headers = {"Daphne-Root-Path": "/api"}
    assert _gateway_request(two_ports.gateway, "GET", "/api/v1/openapi.json", headers) == 200
    assert _gateway_request(two_ports.gateway, "GET", "/api/v1/openapi.json", {}) == 200
    assert _gateway_request(two_ports.gateway, "GET", "/proxy/v1/models", {}) == 401
    # The voters' port keeps its voters' API.
    assert _gateway_request(two_ports.site, "GET", "/api/leaderboard", {}) == 200
