"""The checks of `security check`, bound to the deployment this process runs on: its settings,
its database (agents, contestants) and its machine (Slurm, the kernel's firewall)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.firewall import firewall_from_settings, platform_ports
from agents.models import Agent
from arena.serving.models import Contestant
from security import checks
from security.checks import Problem, Sandbox, Server, Skipped


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
        Check("database sockets closed to other users", checks.database_sockets),
        Check("model servers require their key", _model_servers),
        Check("sandboxes 0700 and owned by their agent", _sandboxes),
        Check("sandboxes held to their quota at write time", _sandbox_quota),
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
