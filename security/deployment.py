"""The checks of `security check`, bound to the deployment this process runs on: its settings,
its database (agents, contestants) and its machine (Slurm, the kernel's firewall)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.firewall import FirewallError, firewall_from_settings, platform_ports
from agents.models import Agent, AgentToken
from agents.services import token_digest
from arena.serving.models import Contestant
from cluster import sandbox_files
from security import checks
from security.checks import Problem, Sandbox, Server, Skipped
from security.listening import site_listeners

# Proxy tokens the platform keeps for its own processes (agents/models.py, AgentToken.Kind).
PLATFORM_HELD_TOKENS = [AgentToken.Kind.SCAFFOLD, AgentToken.Kind.JUDGE]


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[], list[Problem]]


def deployment_checks() -> list[Check]:
    return [
        Check("platform files private", lambda: checks.private_files(Path(settings.VAR_DIR))),
        Check("Slurm enforcement, billing and cgroups", _slurm),
        Check("secrets not at defaults", _secrets),
        Check("firewall keeps agents off platform ports", _firewall),
        Check("every port the site listens on closed to agents", _site_ports),
        Check("agents' nodes on other hosts denied the voting site", _voting_networks),
        Check("database sockets closed to other users", checks.database_sockets),
        Check("model servers require their key", _model_servers),
        Check("sandboxes 0700 and owned by their agent", _sandboxes),
        Check("sandboxes held to their quota at write time", _sandbox_quota),
        Check("no platform-held token in an agent's config", _platform_tokens_in_configs),
        Check("code answers run confined", lambda: checks.untrusted_code_confined(os.environ)),
    ]


def _slurm() -> list[Problem]:
    if not checks.slurm_running():
        if settings.CLUSTER_BACKEND == "local":
            raise Skipped("CLUSTER_BACKEND is local and no Slurm controller answers here")
        return [
            Problem(
                "CLUSTER_BACKEND is slurm but `scontrol ping` finds no controller",
                "start the cluster (infra/slurm/setup.sh on the local setup)",
            )
        ]
    return checks.slurm_enforcement(
        config=_scontrol("show", "config"), partitions=_scontrol("show", "partition", "-o")
    )


def _scontrol(*args: str) -> str:
    done = subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def _secrets() -> list[Problem]:
    return checks.default_secrets(
        secrets={"ARENA_SECRET_KEY": settings.SECRET_KEY, "ARENA_VOTER_SALT": settings.VOTER_SALT}
    )


def _firewall() -> list[Problem]:
    users = (
        Agent.objects.filter(active=True).exclude(unix_user="").values_list("unix_user", flat=True)
    )
    return checks.firewall_rules(
        firewall=firewall_from_settings(),
        agent_users=list(users),
        platform_ports=platform_ports(),
        gateway_port=settings.AGENTS_GATEWAY_PORT,
    )


def _site_ports() -> list[Problem]:
    try:
        state = firewall_from_settings().state()
    except FirewallError:
        state = None
    if state is None:  # no rules, or none to read: the firewall check reports it
        raise Skipped("no firewall rules to compare with (see the firewall check)")
    return checks.site_ports_closed(
        state=state,
        listeners=site_listeners(Path(settings.BASE_DIR)),
        gateway_port=settings.AGENTS_GATEWAY_PORT,
    )


def _voting_networks() -> list[Problem]:
    if not checks.slurm_running():
        raise Skipped("no Slurm controller answers here: no nodes to read")
    nodes = {}
    for line in _scontrol("show", "nodes", "-o").splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        if fields.get("NodeName"):
            nodes[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return checks.agent_nodes_kept_off_voting(
        nodes=nodes, denied=settings.ARENA_VOTING_DENIED_NETWORKS
    )


def _model_servers() -> list[Problem]:
    servers = [
        Server(
            name=contestant.display_name, base_url=contestant.base_url, api_key=contestant.api_key
        )
        for contestant in Contestant.objects.filter(active=True).exclude(base_url="")
    ]
    return checks.model_server_auth(servers)


def _active_sandboxes() -> list[Sandbox]:
    return [
        Sandbox(agent=agent.name, unix_user=agent.unix_user, path=Path(agent.sandbox))
        for agent in Agent.objects.filter(active=True).exclude(sandbox="")
    ]


def _sandboxes() -> list[Problem]:
    return checks.sandboxes(_active_sandboxes())


def _sandbox_quota() -> list[Problem]:
    return checks.sandbox_quota(settings.AGENTS_SANDBOX_STORAGE, _active_sandboxes())


def _platform_tokens_in_configs() -> list[Problem]:
    """Each active agent's `~/.arena/config`, read as root without following a link and at
    most `CONFIG_MAX_BYTES`; one that cannot be read so is left to the sandbox checks."""
    configs = []
    for box in _active_sandboxes():
        where = sandbox_files.SandboxPath(box.path) / ".arena" / "config"
        try:
            text = sandbox_files.read_text(where, max_bytes=checks.CONFIG_MAX_BYTES)
        except OSError:  # missing, a link, too large: not this check's to judge
            continue
        configs.append(checks.AgentConfig(agent=box.agent, path=where.path, text=text))
    return checks.platform_held_tokens_in_configs(configs, _platform_held_token_kind)


def _platform_held_token_kind(token: str) -> str | None:
    return (
        AgentToken.objects.filter(digest=token_digest(token), kind__in=PLATFORM_HELD_TOKENS)
        .values_list("kind", flat=True)
        .first()
    )
