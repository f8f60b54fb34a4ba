"""The kernel's packet filter keeps agents' Unix users off the platform's own ports.

Agents have shells on the machine the platform runs on, so every port the platform listens on
(the voters' site, PostgreSQL, Redis, MariaDB, slurmdbd, the model servers) is one connect()
away. An output-hook rule rejects TCP from any uid in the `agents` set to any local address on
the `platform_ports` set. Everything else stays open: the agent gateway port (the agent API
and the proxy), slurmctld and the slurmds (agents submit with plain sbatch and srun), other
hosts, and whatever ports tests or agents' own jobs open.

One small interface, chosen by ``AGENTS_FIREWALL``: `nftables` (the real one) or `none` (a
machine where agents are not Unix users). Provisioning adds the agent's uid, deprovisioning
removes it, and `python manage.py security firewall` (also run by infra/firewall/setup.sh)
reinstalls the rules and puts every active agent back after a reboot emptied the kernel.
"""

from __future__ import annotations

import json
import pwd
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agents.models import Agent

AGENTS_SET = "agents"
PORTS_SET = "platform_ports"
CHAIN = "output"
PortRange = tuple[int, int]  # inclusive


class FirewallError(RuntimeError):
    pass


@dataclass(frozen=True)
class FirewallState:
    """What the kernel holds now."""

    uids: frozenset[int]
    ports: tuple[PortRange, ...]
    rejects: bool  # the output hook has the rule that rejects agents on those ports

    def covers(self, port: int) -> bool:
        return any(low <= port <= high for low, high in self.ports)


class Firewall(ABC):
    @abstractmethod
    def install(self, *, uids: Iterable[int] = ()) -> None:
        """(Re)load the rules, keeping the uids already blocked, and block `uids` too."""

    @abstractmethod
    def block(self, uid: int) -> None: ...

    @abstractmethod
    def unblock(self, uid: int) -> None: ...

    @abstractmethod
    def state(self) -> FirewallState | None:
        """None when no rules are installed."""


class NoFirewall(Firewall):
    """Agents are not Unix users on this machine (or an outer firewall does the job)."""

    def install(self, *, uids: Iterable[int] = ()) -> None:
        pass

    def block(self, uid: int) -> None:
        pass

    def unblock(self, uid: int) -> None:
        pass

    def state(self) -> FirewallState | None:
        return None


class NftablesFirewall(Firewall):
    """An `inet` table of its own, driven through `nft` with argument lists (never a shell)."""

    def __init__(self, *, table: str, ports: Sequence[PortRange], nft: str = "nft") -> None:
        self.table = table
        self.ports = merge_ports(ports)
        self.nft = nft

    def install(self, *, uids: Iterable[int] = ()) -> None:
        self._run(["-f", "-"], stdin=ruleset(table=self.table, ports=self.ports, uids=uids))

    def block(self, uid: int) -> None:
        state = self.state()
        if state is None or not state.rejects or list(state.ports) != self.ports:
            # Missing, or loaded from other settings (an upgrade's new ports): reloaded whole,
            # in one transaction that keeps the agents already blocked.
            self.install(uids=[uid])
        else:
            self._run(["add", "element", "inet", self.table, AGENTS_SET, "{", str(uid), "}"])

    def unblock(self, uid: int) -> None:
        state = self.state()
        if state is not None and uid in state.uids:
            self._run(["delete", "element", "inet", self.table, AGENTS_SET, "{", str(uid), "}"])

    def state(self) -> FirewallState | None:
        done = self._run(["-j", "list", "table", "inet", self.table], missing_ok=True)
        if done is None:
            return None
        uids: set[int] = set()
        ports: list[PortRange] = []
        rejects = False
        for item in json.loads(done).get("nftables", []):
            if "set" in item and item["set"].get("name") == AGENTS_SET:
                uids.update(int(uid) for uid in item["set"].get("elem", []))
            elif "set" in item and item["set"].get("name") == PORTS_SET:
                ports.extend(_port_element(element) for element in item["set"].get("elem", []))
            elif "rule" in item and item["rule"].get("chain") == CHAIN:
                text = json.dumps(item["rule"].get("expr", []))
                rejects = rejects or all(
                    part in text for part in (f"@{AGENTS_SET}", f"@{PORTS_SET}", "reject")
                )
        return FirewallState(frozenset(uids), tuple(merge_ports(ports)), rejects)

    def _run(self, args: list[str], *, stdin: str = "", missing_ok: bool = False) -> str | None:
        try:
            done = subprocess.run(
                [self.nft, *args], input=stdin, capture_output=True, text=True, timeout=30
            )
        except FileNotFoundError:
            raise FirewallError(
                f"{self.nft} is not installed: run infra/firewall/setup.sh as root"
            ) from None
        if done.returncode != 0:
            if missing_ok and "No such file or directory" in done.stderr:
                return None
            raise FirewallError(f"nft {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout


def ruleset(*, table: str, ports: Sequence[PortRange], uids: Iterable[int] = ()) -> str:
    """The table as one atomic nft transaction. Loading it again resets the rule and the ports
    but keeps the `agents` set: agents provisioned meanwhile stay blocked."""
    elements = ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in ports)
    uid_list = ", ".join(str(uid) for uid in sorted(set(uids)))
    lines = [
        "# RSI Arena: agents' Unix users kept off the platform's ports (agents/firewall.py, "
        "infra/firewall/README.md). Reloading keeps the agents set.",
        f"table inet {table} {{",
        f"\tset {AGENTS_SET} {{ typeof meta skuid; }}",
        f"\tset {PORTS_SET} {{ typeof tcp dport; flags interval; }}",
        f"\tchain {CHAIN} {{ type filter hook output priority filter; policy accept; }}",
        "}",
        f"flush chain inet {table} {CHAIN}",
        f"flush set inet {table} {PORTS_SET}",
        f"add element inet {table} {PORTS_SET} {{ {elements} }}",
        # `fib daddr type local`: 127.0.0.0/8, ::1 and every address of this host.
        f"add rule inet {table} {CHAIN} meta skuid @{AGENTS_SET} fib daddr type local "
        f"tcp dport @{PORTS_SET} counter reject with tcp reset",
    ]
    if uid_list:
        lines.append(f"add element inet {table} {AGENTS_SET} {{ {uid_list} }}")
    return "\n".join(lines) + "\n"


def merge_ports(ports: Iterable[PortRange]) -> list[PortRange]:
    merged: list[PortRange] = []
    for low, high in sorted(ports):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def parse_ports(items: Iterable[str]) -> list[PortRange]:
    """ "8000", "8100-8199" -> [(8000, 8000), (8100, 8199)]."""
    ranges: list[PortRange] = []
    for item in items:
        low, _, high = item.strip().partition("-")
        ranges.append((int(low), int(high or low)))
    return ranges


def platform_ports() -> list[PortRange]:
    """Every port of the platform agents must not reach: the listed ones (site, PostgreSQL,
    Redis, MariaDB, slurmdbd), the public site's, the configured database's and Redis's, and
    the model servers' range. Never the gateway port."""
    ports = parse_ports(settings.AGENTS_FIREWALL_PORTS)
    public = urlsplit(settings.ARENA_PUBLIC_URL)
    if public.hostname:
        ports.append((public.port or (443 if public.scheme == "https" else 80),) * 2)
    base = settings.ARENA_SERVING_BASE_PORT
    ports.append((base, base + settings.AGENTS_FIREWALL_SERVING_PORTS - 1))
    database = settings.DATABASES["default"]
    if "postgresql" in database["ENGINE"]:
        ports.append((int(database.get("PORT") or 5432),) * 2)
    for layer in settings.CHANNEL_LAYERS.values():
        for host in layer.get("CONFIG", {}).get("hosts", []):
            # A host is a URL, or a dict of connection settings with the URL as its address.
            parts = urlsplit(str(host.get("address", "") if isinstance(host, dict) else host))
            if parts.scheme in {"redis", "rediss"}:
                ports.append((parts.port or 6379,) * 2)
    merged = merge_ports(ports)
    gateway = settings.AGENTS_GATEWAY_PORT
    if any(low <= gateway <= high for low, high in merged):
        raise ImproperlyConfigured(
            f"AGENTS_GATEWAY_PORT={gateway} is among the ports agents are kept off "
            f"({format_ports(merged)}): move one of them"
        )
    return merged


def _port_element(element: object) -> PortRange:
    if isinstance(element, dict) and "range" in element:
        low, high = element["range"]
        return int(low), int(high)
    return int(element), int(element)  # type: ignore[call-overload]


def format_ports(ports: Iterable[PortRange]) -> str:
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ports)


def firewall_from_settings() -> Firewall:
    kind = settings.AGENTS_FIREWALL
    if kind == "nftables":
        return NftablesFirewall(table=settings.AGENTS_FIREWALL_TABLE, ports=platform_ports())
    if kind == "none":
        return NoFirewall()
    raise ImproperlyConfigured(f"AGENTS_FIREWALL={kind!r}: nftables or none")


def _uid(unix_user: str) -> int | None:
    try:
        return pwd.getpwnam(unix_user).pw_uid
    except KeyError:
        return None


def agent_firewall_block(*, unix_user: str, firewall: Firewall | None = None) -> None:
    uid = _uid(unix_user)
    if uid is None:
        raise FirewallError(f"no Unix user {unix_user} to keep off the platform's ports")
    (firewall or firewall_from_settings()).block(uid)


def agent_firewall_unblock(*, unix_user: str, firewall: Firewall | None = None) -> None:
    uid = _uid(unix_user)
    if uid is not None:
        (firewall or firewall_from_settings()).unblock(uid)


def firewall_sync(*, firewall: Firewall | None = None) -> list[int]:
    """Reinstall the rules and block every active agent's uid, from the database: the kernel
    forgets its rules at a reboot. Returns the uids blocked."""
    users = (
        Agent.objects.filter(active=True).exclude(unix_user="").values_list("unix_user", flat=True)
    )
    uids = sorted({uid for uid in map(_uid, users) if uid is not None})
    (firewall or firewall_from_settings()).install(uids=uids)
    return uids
