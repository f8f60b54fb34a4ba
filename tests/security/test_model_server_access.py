"""Issue 12, item 12: model servers answer the platform only.

An agent's Unix user, on the same host as the servers (and on the same nodes as Slurm serving
jobs), asks a contestant's real model server for an answer or for the name of its model,
without the key, with a guessed one, and looks for the key where processes show theirs.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from arena.serving.backends import LocalServingBackend
from arena.serving.client import Endpoint, StreamEnd, TextDelta, stream_chat
from arena.serving.local import serving_secrets
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
    backend = LocalServingBackend(host="127.0.0.1", base_port=18400, log_dir=TEST_LOG_DIR)
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
