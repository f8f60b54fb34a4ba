""" "The API key never enters the sandbox" (issue 15, item 2), checked on a real agent: its Unix
user calls the model through the proxy from its sandbox, the upstream receives the key, and
afterwards the key is in no file of the sandbox, in no process environment or command line
the agent's user can read, and not in the database's column as written."""

from __future__ import annotations

import http.server
import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from agents.models import Upstream
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from cluster import sandbox_files
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")
KEY = f"sk-upstream-{secrets.token_hex(20)}"

# Run by the agent's own python3, as its Unix user: what it can find of the key. It reads every
# file it can under its home and every /proc/<pid>/environ and cmdline it is allowed to, and
# prints how many it read and where it found the key.
SEARCH = r"""
import json, os, sys
key = sys.stdin.buffer.read().strip()  # on stdin: an argument would be in its own cmdline
home = os.environ["HOME"]
found, files, environs = [], 0, 0
for folder, _, names in os.walk(home):
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                data = f.read(64 * 1024 * 1024)
        except OSError:
            continue
        files += 1
        if key in data:
            found.append(path)
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                data = f.read(1024 * 1024)
        except OSError:
            continue
        environs += part == "environ"
        if key in data:
            found.append(f"/proc/{pid}/{part}")
print(json.dumps({"found": found, "files": files, "environs": environs}))
"""

# The agent's call through the proxy, with what its config gives it.
CALL = r"""
import json, os, urllib.request
config = dict(
    line.split("=", 1) for line in open(os.path.expanduser("~/.arena/config")).read().splitlines()
    if "=" in line
)
body = json.dumps({"model": "keyed", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 5}).encode()
request = urllib.request.Request(
    config["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions", data=body, method="POST",
    headers={"Authorization": "Bearer " + config["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
reply = urllib.request.urlopen(request, timeout=60).read()
open(os.path.expanduser("~/reply.json"), "wb").write(reply)
print(json.loads(reply)["choices"][0]["message"]["content"])
"""


class _KeyedUpstream(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible upstream that answers only with its key, and notes the keys it saw."""

    seen: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _KeyedUpstream.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({
            "id": "c", "object": "chat.completion", "model": "keyed",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def keyed_upstream() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyedUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.fixture
def agent(arena, slurm, settings):
    settings.AGENTS_ARENA_URL = arena.url
    sandboxes = UnixSandboxes(ROOT)
    done = agent_provision(name="keyless", sandboxes=sandboxes, backend=slurm)
    yield done
    agent_deprovision(name="keyless", sandboxes=sandboxes, backend=slurm)


def _as_agent(done, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    home = done.agent.sandbox
    return subprocess.run(
        ["runuser", "-u", done.agent.unix_user, "--", "env", f"HOME={home}", "/usr/bin/python3",
         *args],
        capture_output=True, text=True, cwd=home, timeout=120, check=False, **kwargs,
    )  # fmt: skip


def test_the_upstream_key_is_nowhere_the_agent_can_read(agent, keyed_upstream):
    Upstream.objects.create(
        name="keyed", base_url=keyed_upstream, upstream_model="keyed", api_key=KEY,
        usd_per_million_prompt_tokens=Decimal("1"), usd_per_million_completion_tokens=Decimal("1"),
    )  # fmt: skip
    _KeyedUpstream.seen.clear()

    called = _as_agent(agent, "-c", CALL)
    assert called.returncode == 0, called.stderr
    assert called.stdout.strip() == "hello"
    assert _KeyedUpstream.seen == [f"Bearer {KEY}"]  # the key was used, on the platform's side

    # A process of the agent's left running while it looks, so there is an environment to read.
    sleeper = subprocess.Popen(
        ["runuser", "-u", agent.agent.unix_user, "--", "sleep", "60"], cwd="/tmp"
    )
    try:
        searched = _as_agent(agent, "-c", SEARCH, input=KEY)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert searched.returncode == 0, searched.stderr
    report = json.loads(searched.stdout)
    assert report["found"] == []
    assert report["files"] >= 3 and report["environs"] >= 2  # config, CLI, reply; its processes
    # The same search finds what the agent does hold: its own proxy token, in its config.
    control = json.loads(_as_agent(agent, "-c", SEARCH, input=agent.proxy_token).stdout)
    assert control["found"] == [str(agent.config_path)]

    # As root too, every file of the sandbox, links never followed.
    home = sandbox_files.SandboxPath(Path(agent.agent.sandbox))
    files = list(sandbox_files.walk_files(home, max_entries=10_000))
    assert any(f.name == "reply.json" for f in files)
    for where in files:
        assert KEY.encode() not in sandbox_files.read_bytes(where, max_bytes=64 * 1024**2), where

    # Encrypted at rest: the column holds a Fernet token, never the key.
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM agents_upstream WHERE name = 'keyed'")
        (stored,) = cursor.fetchone()
    assert stored.startswith("fernet:") and KEY not in stored
    assert Upstream.objects.get(name="keyed").api_key == KEY
