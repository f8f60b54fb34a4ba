"""Issue 25, finding 1: the environment a process the platform starts as an agent is born with.

Before: the harness ran each tool as `runuser -u AGENT -- /usr/bin/env -i …` without `env=`,
so runuser handed the platform's whole environment (the scaffold token, the database URL, the
judges' keys) to `/usr/bin/env`, which already ran as the agent: a background process of the
agent read it from `/proc/PID/environ` before env exec'd the shell. An agent's job cancel ran
`scancel` as the agent with the web worker's whole environment, for a round trip to slurmctld.

The attacker here is a real agent user's background process (`environ_poller.py`) that reads
the environment of every new process of its user as soon as the kernel lets it. The platform's
process carries canary secrets; none may ever reach a process of the agent's uid, nor any
other variable of the platform's.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from agents.harness.executor import ToolExecutor
from cluster.backends.base import JobRequest
from cluster.models import ClusterAccount
from cluster.services import job_submit
from tests.conftest import ROOT
from tests.security.conftest import Player

# The product's packages, and where a process may become another user.
PACKAGES = ("agents", "arena", "cluster", "evalsuite", "frontend", "infra", "safety", "security")
SWITCHES = {"runuser", "setpriv", "su", "sudo", "setuidgid", "chroot"}
THE_ONE_WAY = Path("cluster/as_user.py")

POLLER = (Path(__file__).with_name("environ_poller.py")).read_text()
# What an agent's own processes may hold: the clean environment the platform gives them, and
# what runuser and the shell set themselves.
AGENT_NAMES = {
    "HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "PYTHONUNBUFFERED", "PWD", "OLDPWD",
    "SHLVL", "_",
}  # fmt: skip
TOOL_CALLS = 25
CANCELS = 6


@pytest.fixture
def platform_secrets(monkeypatch) -> dict[str, str]:
    """Canary secrets in the platform's own environment, as the web worker and the harness hold
    the real ones."""
    canary = secrets.token_hex(8)
    values = {
        "ARENA_SCAFFOLD_TOKEN": f"arena_scaffold_canary{canary}",
        "SAFETY_JUDGE_API_KEY": f"sk-judge-canary{canary}",
        "HF_TOKEN": f"hf_canary{canary}",
        "ARENA_CANARY_DATABASE_URL": f"postgres://platform:canary{canary}@db/arena",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def start_poller(shell: Callable[[str], object], home: Path) -> Path:
    """The agent's poller, written and left running in the background by `shell` (a shell of
    the agent's), which starts nothing after it."""
    out = home / "seen.jsonl"
    for path in (out, home / "stop-polling", Path(f"{out}.done")):
        path.unlink(missing_ok=True)
    shell(
        "cat > poll.py <<'EOF'\n" + POLLER + "EOF\n"
        "setsid /usr/bin/python3 poll.py seen.jsonl stop-polling </dev/null >/dev/null 2>&1 &"
    )
    wait_for(out.exists, "the poller did not start")
    return out


def poller_findings(out: Path) -> list[dict]:
    """Stop the poller (a file it looks for: nothing of the agent's runs meanwhile); what it
    read, bounded."""
    (out.parent / "stop-polling").touch()
    wait_for(Path(f"{out}.done").exists, "the poller did not stop")
    return read_findings(out)


def read_findings(out: Path) -> list[dict]:
    with out.open(encoding="utf-8") as lines:
        whole = lines.read(8 << 20).splitlines(keepends=True)
    return [json.loads(line) for line in whole if line.endswith("\n")]


def wait_for(condition: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def assert_no_platform_variable(found: list[dict], canaries: dict[str, str]) -> None:
    """No canary anywhere, and no variable of the platform's (this process's environment,
    less the names an agent's process holds with values of its own)."""
    platform = set(os.environ) - AGENT_NAMES
    leaked = []
    for record in found:
        for item in record["environ"]:
            name, _, value = item.partition("=")
            if name in platform or any(secret in value for secret in canaries.values()):
                leaked.append((record["cmdline"][:3], name))
    assert not leaked, f"the agent read the platform's environment: {leaked[:10]}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_background_process_never_reads_the_platforms_environment_from_a_tool_call(
    players, platform_secrets
):
    mallory: Player = players("sec_env_tool")
    tools = ToolExecutor(
        unix_user=mallory.user, home=mallory.home, python=str(settings.AGENTS_TRAIN_PYTHON)
    )
    out = start_poller(tools.shell, mallory.home)
    for number in range(TOOL_CALLS):
        assert tools.shell(f"echo call {number}; sleep 0.02").exit_code == 0
        assert tools.view_file("poll.py", 1, 1).exit_code == 0
    found = poller_findings(out)

    # The poller saw the tool calls' own processes: the shell, and the file tool's worker.
    commands = [" ".join(record["cmdline"]) for record in found]
    assert any("arena-shell" in command for command in commands), commands[:20]
    assert any("-I -c" in command for command in commands), commands[:20]
    assert_no_platform_variable(found, platform_secrets)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cancel_the_agent_asks_for_runs_scancel_with_nothing_of_the_platforms(
    players, platform_secrets, slurm, settings
):
    settings.CLUSTER_BACKEND = "slurm"
    mallory: Player = players("sec_env_cancel")
    account = ClusterAccount.objects.get(name=mallory.provisioned.agent.cluster_account)
    api = Client(headers={"Authorization": f"Bearer {mallory.provisioned.api_token}"})
    out = start_poller(mallory.shell, mallory.home)
    # scancel lives a few milliseconds: on a loaded machine the poller may miss one, so the
    # agent cancels job after job until it has caught one (as a real attacker would).
    for attempt in range(CANCELS):
        job = job_submit(
            account=account,
            request=JobRequest(
                name=f"env-cancel-{attempt}", script="#!/bin/bash\nsleep 300\n",
                workdir=mallory.home, nodes=1, gpus_per_node=1, time_limit_minutes=5,
                preemptible=False,
            ),
            backend=slurm,
        )  # fmt: skip
        reply = api.post(f"/api/v1/jobs/{job.scheduler_id}/cancel")
        assert reply.status_code == 200, reply.content
        if any(is_scancel(record) for record in read_findings(out)):
            break
    found = poller_findings(out)

    cancels = [record for record in found if is_scancel(record)]
    assert cancels, [record["cmdline"][:2] for record in found]
    assert_no_platform_variable(cancels, platform_secrets)


def is_scancel(record: dict) -> bool:
    return Path(record["cmdline"][0]).name == "scancel"


def test_every_process_the_platform_starts_as_another_user_goes_through_as_user():
    """The audit of finding 1 kept: a user switch named anywhere else in the product (an argv
    element `runuser`, `setpriv`, `sudo` …) would choose its own environment."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT) == THE_ONE_WAY or "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and Path(node.value).name in SWITCHES
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
                # subprocess's own switch (`user=`) needs its environment named beside it.
                if is_subprocess_call(node):
                    keywords = {keyword.arg for keyword in node.keywords}
                    if "user" in keywords and "env" not in keywords:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} user= without env=")
    assert not found, "start it through cluster.as_user.as_user: " + ", ".join(found)


def is_subprocess_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "subprocess"
        and node.func.attr in {"Popen", "run", "call", "check_call", "check_output"}
    )
