"""The deployment kit, end to end: real nginx in front of two daphne workers, supervisord,
PostgreSQL and Redis (infra/deploy/). One kit serves the whole module (up takes most of its
time); each test commits its own rows."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from arena.battles.models import Battle, Vote
from frontend.voters import ip_hash
from tests import factories
from tests.deploy.conftest import (
    BATTLES_PER_NETWORK,
    DENIED_CLIENT,
    DeployedArena,
    arrive,
    free_port,
    post_json,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def access_log_lines(arena: DeployedArena) -> list[str]:
    return Path(arena.state["nginx_access_log"]).read_text().splitlines()


# --- what up started ------------------------------------------------------------------------


def test_up_reports_every_program_running_and_every_worker_answered(
    deployed_arena: DeployedArena,
):
    status = deployed_arena.kit("status")
    assert status.returncode == 0, status.stdout
    for program in ("web:web-0", "web:web-1", "phases", "sync"):
        assert re.search(rf"^{program}\s+RUNNING\s+pid \d+", status.stdout, re.M), status.stdout
    answered = {
        line.split("upstream=")[1].split()[0]
        for line in access_log_lines(deployed_arena)
        if '"GET / ' in line and " 200 " in line
    }
    assert answered == {f"unix:{path}" for path in deployed_arena.state["sockets"]}


def test_a_second_up_refuses_while_the_kit_runs(deployed_arena: DeployedArena):
    again = deployed_arena.kit("up", "--port", str(free_port()))
    assert again.returncode == 1
    assert "already up" in again.stderr
    assert deployed_arena.kit("status").returncode == 0


def test_nginx_serves_the_static_files_itself(deployed_arena: DeployedArena):
    with deployed_arena.client() as client:
        reply = client.get("/static/frontend/arena.css")
    assert reply.status_code == 200
    assert reply.headers["server"] == "nginx"
    assert "max-age=3600" in reply.headers["cache-control"]
    served = [line for line in access_log_lines(deployed_arena) if "arena.css" in line]
    assert served and "upstream=- " in served[-1], "a worker served the static file"


def test_websockets_upgrade_through_nginx(deployed_arena: DeployedArena):
    port = deployed_arena.state["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as ws:
        ws.sendall(
            (
                "GET /ws/leaderboard/ HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: http://127.0.0.1:{port}\r\n\r\n"
            ).encode()
        )
        head = ws.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 101"), head


def test_an_agents_user_cannot_reach_a_worker_around_nginx(deployed_arena: DeployedArena):
    """Around nginx, a local user could write its own X-Forwarded-For: the workers' sockets
    are in a folder only root and nginx's group enter."""
    worker = deployed_arena.state["sockets"][0]
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect({worker!r})"

    def connect_as(user: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["runuser", "-u", user, "--", "python3", "-c", connect],
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert "Permission denied" in connect_as("nobody").stderr
    assert connect_as("www-data").returncode == 0  # nginx's own user does reach it


# --- the client's address behind the proxy --------------------------------------------------


@pytest.fixture
def two_contestants() -> None:
    factories.contestant("alpha-model")
    factories.contestant("beta-model")


def start_battle(client) -> int:
    return post_json(client, "/api/battles", {"prompt": "Say hello"}).status_code


def test_the_network_limit_counts_each_client_behind_nginx_on_its_own(
    deployed_arena: DeployedArena, two_contestants: None
):
    first, second = deployed_arena.client("127.0.0.2"), deployed_arena.client("127.0.0.3")
    with first, second:
        arrive(first)
        arrive(second)
        assert [start_battle(first) for _ in range(BATTLES_PER_NETWORK)] == [201] * 3
        refused = post_json(first, "/api/battles", {"prompt": "Say hello"})
        assert refused.status_code == 429
        assert "network" in refused.json()["error"]
        assert start_battle(second) == 201  # another network, its own limit
    by_network = Counter(Battle.objects.values_list("ip_hash", flat=True))
    assert by_network == {ip_hash("127.0.0.2"): 3, ip_hash("127.0.0.3"): 1}


def test_a_client_cannot_escape_the_limit_with_its_own_forwarded_header(
    deployed_arena: DeployedArena, two_contestants: None
):
    honest = deployed_arena.client("127.0.0.4")
    with honest:
        arrive(honest)
        assert [start_battle(honest) for _ in range(BATTLES_PER_NETWORK)] == [201] * 3
    for pretended in ("198.51.100.1", "198.51.100.2"):
        spoofing = deployed_arena.client("127.0.0.4", **{"X-Forwarded-For": pretended})
        with spoofing:
            arrive(spoofing)
            assert start_battle(spoofing) == 429
    assert set(Battle.objects.values_list("ip_hash", flat=True)) == {ip_hash("127.0.0.4")}


def test_a_denied_network_stays_denied_behind_nginx_whatever_it_claims(
    deployed_arena: DeployedArena,
):
    with deployed_arena.client(DENIED_CLIENT, **{"X-Forwarded-For": "203.0.113.5"}) as denied:
        reply = denied.get("/")
    assert reply.status_code == 403
    assert reply.json()["code"] == "voting_network_denied"
    with deployed_arena.client("127.0.0.5") as allowed:
        assert allowed.get("/").status_code == 200


# --- acknowledged votes survive a killed worker and a database outage -------------------------


class Voters:
    """Voters through nginx, each voting its own finished battles one after another. A vote
    that does not get 200 is tried again (a vote is idempotent), as the page does."""

    def __init__(self, arena: DeployedArena, *, voters: int, battles_each: int) -> None:
        self.replies: list[tuple[str, str, int, dict]] = []  # battle, choice, status, headers
        self.lock = threading.Lock()
        self.voters = []
        a, b = factories.contestant("alpha-model"), factories.contestant("beta-model")
        # Each battle's voter as the site must record it: the session's and the address's.
        self.identity: dict[str, tuple[str, str]] = {}
        for index in range(voters):
            address = f"127.0.1.{index + 1}"
            client = arena.client(address)
            voter = arrive(client)
            battles = [
                factories.complete_battle(voter=voter, a=a, b=b).pk for _ in range(battles_each)
            ]
            self.identity.update(
                {battle: (factories.voter_key(voter), ip_hash(address)) for battle in battles}
            )
            self.voters.append((client, battles))

    def run(self, *, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        threads = [
            threading.Thread(target=self._vote_all, args=(client, battles, deadline))
            for client, battles in self.voters
        ]
        for thread in threads:
            thread.start()
        self.threads = threads

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=300)
        for client, _ in self.voters:
            client.close()

    def _vote_all(self, client, battles: list[str], deadline: float) -> None:
        for number, battle in enumerate(battles):
            choice = ("a", "b", "tie")[number % 3]
            while time.monotonic() < deadline:
                try:
                    reply = post_json(client, f"/api/battles/{battle}/vote", {"choice": choice})
                    status, headers, body = reply.status_code, dict(reply.headers), reply.text
                except (httpx2.HTTPError, OSError) as error:  # no answer: not acknowledged
                    status, headers, body = 0, {}, f"{type(error).__name__}: {error}"
                with self.lock:
                    self.replies.append((battle, choice, status, {**headers, "body": body}))
                if status == 200:
                    break
                time.sleep(0.2)

    @property
    def acknowledged(self) -> dict[str, str]:
        return {battle: choice for battle, choice, status, _ in self.replies if status == 200}

    @property
    def statuses(self) -> Counter[int]:
        return Counter(status for _, _, status, _ in self.replies)

    def unexpected(self, *, allowed: set[int]) -> list[tuple[int, str]]:
        return [
            (status, headers["body"][:300])
            for _, _, status, headers in self.replies
            if status not in allowed
        ]

    def every_battle(self) -> set[str]:
        return {battle for _, battles in self.voters for battle in battles}


def votes_in_database(battles: set[str]) -> dict[str, str]:
    connection.close()  # a connection cut by the outage, if any
    return dict(Vote.objects.filter(battle_id__in=battles).values_list("battle_id", "choice"))


def test_a_worker_killed_mid_run_loses_no_acknowledged_vote_and_comes_back(
    deployed_arena: DeployedArena,
):
    voters = Voters(deployed_arena, voters=4, battles_each=40)
    killed = deployed_arena.program_pid("web:web-0")
    assert killed is not None
    voters.run(deadline_s=240)
    _wait_until(lambda: len(voters.acknowledged) >= 20, 120, "votes before the kill")
    subprocess.run(["kill", "-9", str(killed)], check=True)
    voters.join()

    assert votes_in_database(voters.every_battle()) == voters.acknowledged
    assert set(voters.acknowledged) == voters.every_battle(), voters.statuses
    assert not voters.unexpected(allowed={200, 502}), voters.statuses
    # Behind nginx each vote is its own voter's, from its own address.
    recorded = Vote.objects.filter(battle_id__in=voters.every_battle())
    assert {
        battle: (voter_key, network)
        for battle, voter_key, network in recorded.values_list("battle_id", "voter_key", "ip_hash")
    } == voters.identity

    # The supervisor starts it again, and nginx sends it requests again.
    _wait_until(
        lambda: deployed_arena.program_pid("web:web-0") not in {None, killed}, 180, "the restart"
    )
    socket_of_killed = f"unix:{deployed_arena.state['sockets'][0]}"

    def restarted_worker_answers() -> bool:
        with deployed_arena.client() as client:
            client.get("/api/leaderboard")
        return any(
            "/api/leaderboard" in line
            and f"upstream={socket_of_killed} " in line
            and " 200 " in line
            for line in access_log_lines(deployed_arena)[-20:]
        )

    _wait_until(restarted_worker_answers, 180, "the restarted worker to answer through nginx")


def test_requests_during_a_database_outage_get_503_and_acknowledged_votes_are_kept(
    deployed_arena: DeployedArena,
):
    voters = Voters(deployed_arena, voters=4, battles_each=30)
    voters.run(deadline_s=180)
    _wait_until(lambda: len(voters.acknowledged) >= 10, 120, "votes before the outage")
    with database_cut_off():
        time.sleep(1.5)
        with deployed_arena.client() as client:
            page = client.get("/")
    voters.join()

    assert page.status_code == 503
    assert "try again" in page.text and page.headers["retry-after"] == "5"
    assert votes_in_database(voters.every_battle()) == voters.acknowledged
    assert not voters.unexpected(allowed={200, 503}), voters.statuses
    outage_replies = [headers for *_, status, headers in voters.replies if status == 503]
    assert outage_replies, "no vote was in flight during the outage"
    assert all(
        headers["retry-after"] == "5" and "database_unavailable" in headers["body"]
        for headers in outage_replies
    )
    # Once the database is back, the workers reconnect and every vote goes through.
    assert set(voters.acknowledged) == voters.every_battle(), voters.statuses


class database_cut_off:
    """The test database unreachable: every connection to it ended, new ones refused (as a
    restart does), without touching the PostgreSQL the other tests share."""

    def __enter__(self) -> None:
        db = settings.DATABASES["default"]
        self.name = db["NAME"]
        self.admin = psycopg.connect(
            host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname="postgres",
            password=db["PASSWORD"] or None, autocommit=True,
        )  # fmt: skip
        self.admin.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [self.name],
        )

    def __exit__(self, *exc: object) -> None:
        self.admin.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')
        self.admin.close()
        connection.close()


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# --- down -----------------------------------------------------------------------------------


def test_down_stops_everything_and_is_safe_to_repeat(deployed_arena: DeployedArena):
    pids = [deployed_arena.program_pid(p) for p in ("web:web-0", "web:web-1", "phases", "sync")]
    nginx_pid = int((deployed_arena.deploy_dir / "nginx.pid").read_text())
    assert all(pids)
    first = deployed_arena.kit("down")
    assert first.returncode == 0, first.stderr
    for pid in [*pids, nginx_pid]:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), f"pid {pid} still runs"
    assert not Path(deployed_arena.state["public_dir"]).exists()  # sockets, static files
    again = deployed_arena.kit("down")
    assert again.returncode == 0 and "nothing was running" in again.stdout
    assert deployed_arena.kit("status").returncode == 3


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
