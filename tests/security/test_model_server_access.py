"""Issue 12, item 12: model servers answer the platform only.

An agent's Unix user, on the same host as the servers (and on the same nodes as Slurm serving
jobs), asks a contestant's real model server for an answer or for the name of its model,
without the key, with a guessed one, and looks for the key where processes show theirs.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from arena.serving.backends import LocalServingBackend
from arena.serving.client import Endpoint, StreamEnd, TextDelta, stream_chat
from arena.serving.local import ServerStartError, authorized_health, serving_secrets
from arena.serving.models import Contestant
from arena.serving.services import contestant_register
from arena.serving.slurm import SlurmServingBackend
from tests.conftest import TEST_LOG_DIR
from tests.security.conftest import Player
from tests.serving.test_slurm_serving import SERVER_MEMORY_MB, TEST_COMMAND
from tests.serving.test_slurm_serving import serving_folder as slurm_folder

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

serving_folder = slurm_folder  # the fixture, under the name the test asks for

ASK = {"messages": [{"role": "user", "content": "What is 2 plus 3?"}], "max_tokens": 4}


def _request(player: Player, url: str, *, body: dict | None = None, key: str = "") -> tuple:
    """(status, body) of one request the agent makes with its own `python3`; status 0 when
    the connection itself is refused."""
    program = f"""
import json, sys, urllib.error, urllib.request
body = {json.dumps(body)!r}
request = urllib.request.Request({url!r}, data=body.encode() if body != "null" else None,
                                 headers={{"Content-Type": "application/json"}})
if {key!r}:
    request.add_header("Authorization", "Bearer " + {key!r})
try:
    with urllib.request.urlopen(request, timeout=60) as reply:
        print(reply.status); print(reply.read().decode(errors="replace"))
except urllib.error.HTTPError as error:
    print(error.code); print(error.read().decode(errors="replace"))
except OSError as error:
    print(0); print(error)
"""
    done = player.shell(f"python3 -c {shlex.quote(program)}")
    status, _, text = done.stdout.partition("\n")
    assert status.strip().isdigit(), done.stderr
    return int(status), text


def _assert_refused(player: Player, endpoint: Endpoint, checkpoint: str) -> None:
    base = endpoint.base_url  # .../v1
    root = base.removesuffix("/v1")
    wrong = endpoint.api_key[::-1]
    for url, body, key in [
        (f"{base}/models", None, ""),
        (f"{base}/models", None, wrong),
        (f"{base}/chat/completions", {**ASK, "model": endpoint.model}, ""),
        (f"{base}/chat/completions", {**ASK, "model": checkpoint}, ""),
        (f"{base}/chat/completions", {**ASK, "model": endpoint.model}, wrong),
        (f"{base}/completions", {"prompt": "2+3=", "max_tokens": 2}, ""),
        (f"{root}/load_model", {"model": checkpoint}, ""),
        (f"{root}/reset", {}, ""),
        (f"{root}/health", None, ""),
    ]:
        status, text = _request(player, url, body=body, key=key)
        assert status in {0, 401, 403}, f"{url} answered the agent: {status} {text[:300]}"
        assert checkpoint not in text


def _assert_key_required(endpoint: Endpoint) -> None:
    """The key itself, whatever a firewall does for agents: even this host's root, without
    the key, gets 401 everywhere."""
    root = endpoint.base_url.removesuffix("/v1")
    for path in ["/v1/models", "/health", "/v1/chat/completions", "/load_model", "/reset"]:
        done = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X",
             "GET" if path in {"/v1/models", "/health"} else "POST", f"{root}{path}"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert done.stdout == "401", f"{path} answered {done.stdout} without the key"


def _assert_served_to_the_platform(endpoint: Endpoint, checkpoint: str) -> None:
    assert endpoint.api_key and checkpoint not in endpoint.model and "/" not in endpoint.model

    async def ask() -> tuple[str, StreamEnd]:
        text, end = "", None
        async for event in stream_chat(
            endpoint, ASK["messages"], max_tokens=8, temperature=0.0, timeout_s=60
        ):
            if isinstance(event, TextDelta):
                text += event.text
            else:
                end = event
        assert end is not None
        return text, end

    text, end = asyncio.run(ask())
    assert end.finish_reason in {"stop", "length"}, end.error
    assert text


def _models_listing(endpoint: Endpoint) -> str:
    done = subprocess.run(
        ["curl", "-s", "-H", f"Authorization: Bearer {endpoint.api_key}",
         f"{endpoint.base_url}/models"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


def _assert_key_hidden(player: Player, key: str) -> None:
    """No process shows the key on its command line, and no other user's environment."""
    seen = player.shell("ps -eo args; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert key not in seen.stdout


def _listening_ports(pid: int) -> set[int]:
    done = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=30, check=True)
    ports = set()
    for line in done.stdout.splitlines():
        if f"pid={pid}," in line:
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    return ports


def test_a_local_model_server_answers_only_the_platform(players, tiny_models) -> None:
    eve: Player = players("sec_serve_eve")
    backend = LocalServingBackend(host="127.0.0.1", base_port=0, log_dir=TEST_LOG_DIR)
    checkpoint = str((tiny_models / "instruct").resolve())
    try:
        (endpoint,) = backend.start([tiny_models / "instruct"])
        _assert_refused(eve, endpoint, checkpoint)
        _assert_key_required(endpoint)
        _assert_key_hidden(eve, endpoint.api_key)
        listing = _models_listing(endpoint)
        assert endpoint.model in listing and checkpoint not in listing
        assert "instruct" not in json.loads(listing)["data"][0]["id"]
        # No second, unguarded port behind it: the server listens where the platform calls.
        (server,) = backend.servers
        assert server.pid is not None
        assert _listening_ports(server.pid) == {urlsplit(endpoint.base_url).port}
        _assert_served_to_the_platform(endpoint, checkpoint)
    finally:
        backend.stop()


def test_a_slurm_model_server_answers_only_the_platform(
    players, tiny_models, slurm, serving_folder: Path
) -> None:
    eve: Player = players("sec_serve_eve")
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=180,
        memory_mb=SERVER_MEMORY_MB,
    )  # fmt: skip
    checkpoint = str((tiny_models / "instruct").resolve())
    try:
        (endpoint,) = backend.start([tiny_models / "instruct"])
        _assert_refused(eve, endpoint, checkpoint)
        _assert_key_required(endpoint)
        _assert_key_hidden(eve, endpoint.api_key)
        (job,) = backend.jobs
        # Neither the job's folder nor what Slurm shows of the job gives the key away.
        (key_file,) = serving_folder.glob("*/serve.key")
        assert (key_file.stat().st_mode & 0o777, key_file.parent.stat().st_mode & 0o777) == (
            0o600,
            0o700,
        )
        shown = eve.shell(f"scontrol show job {job.scheduler_id}; squeue -o '%j %o'")
        assert endpoint.api_key not in shown.stdout and "instruct" not in shown.stdout
        listing = _models_listing(endpoint)
        assert endpoint.model in listing and checkpoint not in listing
        _assert_served_to_the_platform(endpoint, checkpoint)
    finally:
        backend.stop()


def test_a_database_reader_finds_no_model_server_key() -> None:
    key, name = serving_secrets()
    contestant_register(display_name="keyed", endpoint=Endpoint("http://127.0.0.1:9/v1", name, key))
    with connection.cursor() as cursor:  # what `psql`, a dump or a backup shows
        cursor.execute("SELECT api_key FROM serving_contestant")
        (stored,) = cursor.fetchone()
    assert key not in stored and stored.startswith("fernet:")
    assert Contestant.objects.get(display_name="keyed").api_key == key


# The agent's squatter, run as its own Unix user: it holds every free port of a block, watches
# the process table for a model server that names the port it is about to bind, and listens
# there first. Whatever connects is written down and gets `200 {"status": "ok"}`, so a
# readiness check that trusts any 200 hands the agent the contestant's endpoint.
SQUATTER = r"""
import os, re, socket, sys, threading, time
first, count, seconds, caught = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
marker = sys.argv[5] if len(sys.argv) > 5 else ""
held, lock = [], threading.Lock()

def serve(listener):
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        connection.settimeout(5)
        try:
            data = connection.recv(65536)
            with lock, open(caught, "ab") as log:
                log.write(b"port %d\n" % listener.getsockname()[1] + data + b"\n--\n")
            body = b'{"status": "ok", "proof": "0"}'
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        finally:
            connection.close()

def hold(port):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError:
        listener.close()
        return False
    held.append(port)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    return True

for port in range(first, first + count):
    hold(port)
with open(caught + ".held", "w") as out:
    out.write(" ".join(map(str, held)))
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                args = file.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "arena.serving.guard" not in " ".join(args) or marker not in " ".join(args):
            continue
        for flag, value in zip(args, args[1:]):
            # Only its own test's servers: other servers on this host are not this test's.
            if flag == "--port" and value.isdigit() and int(value) not in held and (
                    marker or first <= int(value) < first + 50):
                hold(int(value))
    time.sleep(0.005)
"""


def test_an_agent_listening_first_on_a_model_servers_port_gets_nothing(
    players, tiny_models, tmp_path
) -> None:
    """Issue 12, item 12 (review): the platform picked a free port, let it go, and the server
    bound it seconds later; an agent listening there first got the readiness check, with the
    key, and became the contestant's endpoint. Now the platform never sends anything to a
    listener it has not verified as its own server."""
    mallory: Player = players("sec_serve_mallory")
    first, count = 18600, 6
    caught = mallory.home / "caught.log"
    squatter = subprocess.Popen(
        ["runuser", "-u", mallory.user, "--", "python3", "-c", SQUATTER,
         str(first), str(count), "240", str(caught)],
        cwd=mallory.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    backend = LocalServingBackend(host="127.0.0.1", base_port=first, log_dir=TEST_LOG_DIR)
    checkpoint = str((tiny_models / "instruct").resolve())
    try:
        held_file = Path(f"{caught}.held")
        for _ in range(200):
            if held_file.exists():
                break
            time.sleep(0.05)
        held = {int(port) for port in held_file.read_text().split()}
        assert held, "the squatter holds no port"
        (endpoint,) = backend.start([tiny_models / "instruct"])
        port = urlsplit(endpoint.base_url).port
        seen = caught.read_bytes() if caught.exists() else b""
        assert endpoint.api_key.encode() not in seen, "the platform sent the key to the agent"
        assert seen == b"", f"the platform talked to the agent's listener: {seen[:300]!r}"
        assert port not in held
        (server,) = backend.servers
        assert server.pid is not None and port in _listening_ports(server.pid), (
            "the endpoint is not the platform's own server"
        )
        _assert_served_to_the_platform(endpoint, checkpoint)
        seen = caught.read_bytes() if caught.exists() else b""
        assert endpoint.api_key.encode() not in seen
    finally:
        backend.stop()
        squatter.terminate()
        squatter.wait(timeout=30)


def test_a_listener_that_answers_200_to_everything_is_not_a_model_server(players) -> None:
    """The readiness check proves who answers without sending the key: a listener that says
    200 to anything learns nothing and is not taken for a server."""
    mallory: Player = players("sec_serve_mallory")
    first = 18620
    caught = mallory.home / "caught.log"
    squatter = subprocess.Popen(
        ["runuser", "-u", mallory.user, "--", "python3", "-c", SQUATTER,
         str(first), "1", "60", str(caught)],
        cwd=mallory.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        held_file = Path(f"{caught}.held")
        for _ in range(200):
            if held_file.exists():
                break
            time.sleep(0.05)
        assert held_file.read_text().split() == [str(first)]
        key, _ = serving_secrets()
        assert not authorized_health(f"http://127.0.0.1:{first}", key)
        seen = caught.read_bytes()
        assert seen, "the check never reached the listener"
        assert key.encode() not in seen
    finally:
        squatter.terminate()
        squatter.wait(timeout=30)


def test_an_agent_listening_first_on_a_slurm_servers_port_gets_nothing(
    players, tiny_models, slurm, serving_folder: Path
) -> None:
    """The same race on a cluster node: the job picked a port, let it go, wrote endpoint.json
    and only then started the server. The agent (on the same node) watches for the server's
    `--port` and listens there first, every time. The platform must never send it the key nor
    take it for the server: the job checks whose socket listens before it says where the server
    is, tries other ports, and fails with a clear reason when every one is taken."""
    mallory: Player = players("sec_serve_mallory")
    # A checkpoint path of its own: the squatter goes after this test's server only.
    checkpoint = serving_folder / f"ckpt-{secrets.token_hex(4)}"
    shutil.copytree(tiny_models / "instruct", checkpoint)
    caught = mallory.home / "caught.log"
    squatter = subprocess.Popen(
        ["runuser", "-u", mallory.user, "--", "python3", "-c", SQUATTER,
         "1", "0", "400", str(caught), checkpoint.name],
        cwd=mallory.home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=300,
        memory_mb=SERVER_MEMORY_MB,
    )  # fmt: skip
    try:
        held_file = Path(f"{caught}.held")
        for _ in range(200):
            if held_file.exists():
                break
            time.sleep(0.05)
        try:
            (endpoint,) = backend.start([checkpoint])
        except ServerStartError as refused:
            assert "taken by another user" in str(refused), refused
            endpoint = None
        seen = caught.read_bytes() if caught.exists() else b""
        assert b"Bearer" not in seen, "the platform sent the key to the agent"
        if endpoint is not None:
            port = urlsplit(endpoint.base_url).port
            assert f"port {port}\n".encode() not in seen
            _assert_served_to_the_platform(endpoint, str(checkpoint.resolve()))
        else:
            assert seen == b"", f"the platform talked to the agent's listener: {seen[:300]!r}"
    finally:
        backend.stop()
        squatter.terminate()
        squatter.wait(timeout=30)
