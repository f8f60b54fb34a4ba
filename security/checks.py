"""How a deployment stands against the trust boundaries (DESIGN.md §7), one small check each.

Every check is a plain function of what it inspects, returning a list of `Problem`s: one line
saying what is wrong and how to fix it. `python manage.py security check` runs them all on the
deployment it runs on (see `deployment_checks`); the tests call each one on planted problems.
A check that cannot apply here raises `Skipped` with the reason instead.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from agents.firewall import (
    Firewall,
    FirewallError,
    FirewallState,
    NoFirewall,
    PortRange,
    format_ports,
)
from cluster import private_tmp
from cluster.as_user import as_user
from security.listening import Listener
from security.slurm_policy import (
    BILLING_WEIGHTED_TRES,
    SLURM_CONFIG_CONTAINS,
    SLURM_CONFIG_EQUALS,
    SLURMDBD_OLD_DEFAULT_PASSWORDS,
)

SECRET_FILES = ("secret_key", "voter_salt", "field_encryption_key")
SLURMDBD_CONF = Path("/etc/slurm/slurmdbd.conf")
ROOT_ONLY_SECRETS = (Path("/etc/slurm/slurmdbd.pass"), Path("/etc/munge/munge.key"))
SLURMCTLD_PORT = 6817
MODEL_SERVER_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what} -- fix: {self.fix}"


class Skipped(Exception):
    """The check does not apply to this deployment; the message says why."""


# --- the platform's own files -----------------------------------------------------------------


PROTECTED_HARDLINKS = Path("/proc/sys/fs/protected_hardlinks")


def private_files(
    var_dir: Path, *, protected_hardlinks: Path = PROTECTED_HARDLINKS
) -> list[Problem]:
    """Nobody but the platform reaches its files: VAR_DIR is a directory of the platform's own,
    mode 0700, so nothing below it can be opened by path whatever its own mode (the local
    cluster hands a job its 0644 script through a descriptor, model files are 0644 for the
    servers: both fine behind a 0700 folder); no entry in it is a link, through which the
    platform would write elsewhere; the secret files are exactly 0600; and the kernel refuses
    other users' hard links to the platform's files (fs.protected_hardlinks), the one way to
    reach a file without its folders. Links are never followed: a link has no mode."""
    try:
        top = var_dir.lstat()
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(top.st_mode):
        return [Problem(f"{var_dir} is a link", "make it a directory of its own, mode 0700")]
    problems: list[Problem] = []
    if top.st_uid != os.geteuid():
        problems.append(
            Problem(
                f"{var_dir} belongs to uid {top.st_uid}, not the platform's (uid {os.geteuid()})",
                f"chown -R {_user_name(os.geteuid())} {var_dir}",
            )
        )
    if stat.S_IMODE(top.st_mode) & 0o077:
        problems.append(Problem(f"{var_dir} is mode {_mode(top.st_mode)}", f"chmod 700 {var_dir}"))
    for name in SECRET_FILES:
        path = var_dir / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o600:
            problems.append(
                Problem(
                    f"secret {path} is {_kind(info.st_mode)} mode {_mode(info.st_mode)}, not a "
                    "0600 file",
                    f"rm {path} and restart (a new one is made 0600), or chmod 600 {path}",
                )
            )
    with os.scandir(var_dir) as entries:
        for entry in sorted(entries, key=lambda entry: entry.name):
            if entry.is_symlink():
                problems.append(
                    Problem(
                        f"{entry.path} is a link to {os.readlink(entry.path)}: what the platform"
                        " writes there leaves its private folder",
                        f"replace {entry.path} with a folder of its own",
                    )
                )
    try:
        hardlinks = protected_hardlinks.read_text().strip()
    except OSError:
        hardlinks = "unknown"
    if hardlinks != "1":
        problems.append(
            Problem(
                f"fs.protected_hardlinks is {hardlinks}: another user may hard-link the"
                " platform's files out of its private folder",
                "sysctl -w fs.protected_hardlinks=1 (and set it in /etc/sysctl.d/)",
            )
        )
    return problems


# --- Slurm ---------------------------------------------------------------------------------


def slurm_running() -> bool:
    try:
        done = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=20, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return "is UP" in done.stdout


def slurm_enforcement(*, config: str, partitions: str) -> list[Problem]:
    """`scontrol show config` and `scontrol show partition --oneliner` against the policy in
    security/slurm_policy.py (the one place that says what infra/slurm/setup.sh establishes)."""
    values = _slurm_config(config)
    problems: list[Problem] = []
    for key, wanted in SLURM_CONFIG_CONTAINS.items():
        have = {part.strip() for part in values.get(key, "").split(",") if part.strip()}
        missing = sorted(set(wanted) - have)
        if missing:
            problems.append(
                Problem(
                    f"Slurm {key} = {values.get(key, '(unset)')} lacks {','.join(missing)}",
                    f"{key}={','.join(sorted(have | set(wanted)))} in slurm.conf "
                    "(infra/slurm/setup.sh writes it), then run it again",
                )
            )
    for key, wanted_value in SLURM_CONFIG_EQUALS.items():
        if values.get(key) != wanted_value:
            problems.append(
                Problem(
                    f"Slurm {key} = {values.get(key, '(unset)')}, not {wanted_value}",
                    f"{key}={wanted_value} in the Slurm config (infra/slurm/setup.sh writes "
                    "it), then run it again",
                )
            )
    for line in partitions.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "PartitionName" not in fields:
            continue
        weights = _billing_weights(fields.get("TRESBillingWeights", ""))
        unbilled = [tres for tres in BILLING_WEIGHTED_TRES if weights.get(tres.lower(), 0) <= 0]
        if unbilled:
            problems.append(
                Problem(
                    f"Slurm partition {fields['PartitionName']} bills nothing for "
                    f"{','.join(unbilled)} (TRESBillingWeights="
                    f"{fields.get('TRESBillingWeights', '(unset)')}): such jobs hold nodes free",
                    "give CPU, Mem and GRES/gpu billing weights in GPU-equivalents "
                    "(infra/slurm/setup.sh), then run it again",
                )
            )
    return problems


def _slurm_config(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if separator and key.strip() and " " not in key.strip():
            values[key.strip()] = value.strip()
    return values


def _billing_weights(text: str) -> dict[str, float]:
    weights = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            weights[name.strip().lower()] = float(value.rstrip("KMGTP") or 0)
        except ValueError:
            continue
    return weights


# --- secrets --------------------------------------------------------------------------------


def default_secrets(
    *,
    secrets: dict[str, str],
    slurmdbd_conf: Path = SLURMDBD_CONF,
    root_only: Iterable[Path] = ROOT_ONLY_SECRETS,
) -> list[Problem]:
    """Settings secrets that are guessable, and the Slurm ones still at their old fixed
    default or readable by other users."""
    problems: list[Problem] = []
    for name, value in secrets.items():
        if _weak(value):
            problems.append(
                Problem(
                    f"{name} is a placeholder or too short to be secret",
                    f"set {name} to a long random value (python -c 'import secrets; "
                    "print(secrets.token_urlsafe(50))'), or unset it to use the generated one",
                )
            )
    try:
        info = slurmdbd_conf.lstat()
    except FileNotFoundError:
        info = None
    if info is not None:
        if stat.S_IMODE(info.st_mode) & 0o077:
            problems.append(
                Problem(
                    f"{slurmdbd_conf} (the accounting database password) is mode "
                    f"{_mode(info.st_mode)}",
                    f"chmod 600 {slurmdbd_conf}",
                )
            )
        password = _conf_value(slurmdbd_conf.read_text(errors="replace"), "StoragePass")
        if password in SLURMDBD_OLD_DEFAULT_PASSWORDS:
            problems.append(
                Problem(
                    f"{slurmdbd_conf}: StoragePass is still the old fixed default",
                    "run infra/slurm/setup.sh as root (it generates a password per install)",
                )
            )
    for path in root_only:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_IMODE(info.st_mode) & 0o077:
            problems.append(
                Problem(f"secret {path} is mode {_mode(info.st_mode)}", f"chmod 600 {path}")
            )
    return problems


def _weak(value: str) -> bool:
    lowered = value.lower()
    return (
        len(value) < 32
        or len(set(value)) < 10
        or lowered.startswith("django-insecure")
        or any(word in lowered for word in ("changeme", "change-me", "secret", "example"))
    )


def _conf_value(text: str, key: str) -> str | None:
    for line in text.splitlines():
        name, separator, value = line.partition("=")
        if separator and name.strip() == key:
            return value.strip()
    return None


# --- the firewall ---------------------------------------------------------------------------


def firewall_rules(
    *,
    firewall: Firewall,
    agent_users: Iterable[str],
    platform_ports: Iterable[PortRange],
    gateway_port: int,
) -> list[Problem]:
    """The rule that keeps agents off the platform's ports is in the kernel, names every
    active agent's uid and every platform port, and leaves the gateway and slurmctld open."""
    setup = "run infra/firewall/setup.sh as root (or python manage.py security firewall)"
    if isinstance(firewall, NoFirewall):
        return [
            Problem(
                "no firewall: agents' Unix users reach every platform port (AGENTS_FIREWALL=none)",
                f"set AGENTS_FIREWALL=nftables and {setup}",
            )
        ]
    try:
        state = firewall.state()
    except FirewallError as failed:
        return [Problem(f"the firewall cannot be read: {failed}", setup)]
    if state is None:
        return [Problem("the firewall's nftables table is not loaded (a reboot?)", setup)]
    problems: list[Problem] = []
    if not state.rejects:
        problems.append(Problem("the firewall's table has no rule rejecting agents", setup))
    for user in agent_users:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            problems.append(
                Problem(
                    f"active agent's Unix user {user} does not exist",
                    "deprovision it or provision it again (python manage.py agents ...)",
                )
            )
            continue
        if uid not in state.uids:
            problems.append(
                Problem(f"agent user {user} (uid {uid}) is not in the firewall's agents set", setup)
            )
    uncovered = [(low, high) for low, high in platform_ports if not _covered(state, low, high)]
    if uncovered:
        problems.append(
            Problem(
                f"platform ports {format_ports(uncovered)} are open to agents "
                f"(covered: {format_ports(state.ports)})",
                f"add them to AGENTS_FIREWALL_PORTS and {setup}",
            )
        )
    for port, what in ((gateway_port, "the agent gateway"), (SLURMCTLD_PORT, "slurmctld")):
        if state.covers(port):
            problems.append(
                Problem(
                    f"port {port} ({what}) is closed to agents",
                    f"take {port} out of AGENTS_FIREWALL_PORTS and {setup}",
                )
            )
    return problems


def site_ports_closed(
    *, state: FirewallState, listeners: Iterable[Listener], gateway_port: int
) -> list[Problem]:
    """Every port the site really listens on (read from the kernel, not from the settings) is
    in the firewall's blocked set, but the agent gateway's: a kit on 8080 or production on 80
    and 443 is the voting site, whatever AGENTS_FIREWALL_PORTS says."""
    return [
        Problem(
            f"port {listener.port} ({listener.program}) serves the site and is open to agents "
            f"(the firewall covers {format_ports(state.ports)})",
            f"add {listener.port} to AGENTS_FIREWALL_PORTS and run infra/firewall/setup.sh as "
            "root (or python manage.py security firewall)",
        )
        for listener in listeners
        if listener.port != gateway_port and not state.covers(listener.port)
    ]


def agent_nodes_kept_off_voting(*, nodes: dict[str, str], denied: Iterable[str]) -> list[Problem]:
    """This host's firewall sees only this host's sockets. An agent's job on a node of another
    host reaches the site from that node's address, which must therefore be in
    ARENA_VOTING_DENIED_NETWORKS. `nodes`: Slurm node name -> its NodeAddr."""
    networks = [ipaddress.ip_network(network.strip(), strict=False) for network in denied]
    problems = []
    for node, address in sorted(nodes.items()):
        if _on_this_host(f"http://[{address}]" if ":" in address else f"http://{address}"):
            continue
        try:
            found = {
                str(info[4][0]).partition("%")[0] for info in socket.getaddrinfo(address, None)
            }
        except OSError:
            found = set()
        open_ones = sorted(
            ip for ip in found if not any(ipaddress.ip_address(ip) in net for net in networks)
        )
        if open_ones or not found:
            problems.append(
                Problem(
                    f"Slurm node {node} ({address}: {', '.join(open_ones) or 'unresolved'}) "
                    "runs agents' jobs on another host, and the voting site answers it "
                    "(not in ARENA_VOTING_DENIED_NETWORKS)",
                    "add the cluster's networks to ARENA_VOTING_DENIED_NETWORKS "
                    "(frontend/README.md)",
                )
            )
    return problems


def _covered(state, low: int, high: int) -> bool:
    return any(have_low <= low and high <= have_high for have_low, have_high in state.ports)


# --- the databases' Unix sockets ------------------------------------------------------------

POSTGRES_SOCKET_DIR = Path("/var/run/postgresql")
MARIADB_SOCKET = Path("/run/mysqld/mysqld.sock")


def database_sockets(
    *,
    postgres_dir: Path = POSTGRES_SOCKET_DIR,
    mariadb_socket: Path = MARIADB_SOCKET,
    other_user: str = "nobody",
) -> list[Problem]:
    """The packet filter sees TCP only. PostgreSQL's socket folder must be closed to other
    users, and MariaDB's root must refuse another Unix user on the socket (tried for real, as
    `other_user`, when this runs as root)."""
    fix = "run infra/firewall/setup.sh as root"
    problems: list[Problem] = []
    try:
        info = postgres_dir.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_IMODE(info.st_mode) & 0o007:
        problems.append(
            Problem(
                f"{postgres_dir} is mode {_mode(info.st_mode)}: every user reaches PostgreSQL's "
                "socket",
                f"chmod o-rwx {postgres_dir} ({fix})",
            )
        )
    if os.geteuid() == 0 and mariadb_socket.exists() and shutil.which("mysql"):
        attempt = as_user(other_user, [
            "mysql", f"--socket={mariadb_socket}", "--connect-timeout=5", "-u", "root",
            "-e", "SELECT 1",
        ])  # fmt: skip
        try:
            done = subprocess.run(
                attempt.argv, env=attempt.env, capture_output=True, text=True, timeout=30
            )
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0:
            problems.append(
                Problem(
                    f"MariaDB's root answers Unix user {other_user} on {mariadb_socket} "
                    "without a password",
                    f"ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket ({fix})",
                )
            )
    return problems


# --- model servers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    name: str
    base_url: str
    api_key: str


def model_server_auth(
    servers: Iterable[Server], *, get: Callable[..., httpx.Response] = httpx.get
) -> list[Problem]:
    """Each model server on this host refuses a request without its key. Checked for real:
    the request is sent, and any 2xx or 3xx answer is a problem."""
    problems: list[Problem] = []
    for server in servers:
        if not _on_this_host(server.base_url):
            continue
        if not server.api_key:
            problems.append(
                Problem(
                    f"contestant {server.name} ({server.base_url}) has no api_key: its server "
                    "cannot be asking for one",
                    "start its server with a per-server key and store it on the contestant",
                )
            )
        url = server.base_url.rstrip("/") + "/models"
        try:
            answer = get(url, timeout=MODEL_SERVER_TIMEOUT_S, follow_redirects=False)
        except httpx.HTTPError:
            continue  # not listening: nothing answers anyone
        if answer.status_code < 400:
            problems.append(
                Problem(
                    f"model server of {server.name} answers GET {url} without a key "
                    f"(HTTP {answer.status_code})",
                    "restart it with its per-server key (vLLM: VLLM_API_KEY / --api-key)",
                )
            )
    return problems


def _on_this_host(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    if host in {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified or str(address) in _host_addresses()


def _host_addresses() -> set[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


# --- sandboxes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    agent: str
    unix_user: str
    path: Path


def sandboxes(boxes: Iterable[Sandbox]) -> list[Problem]:
    """Each sandbox is a directory (not a link), mode 0700, owned by its agent's user."""
    problems: list[Problem] = []
    for box in boxes:
        try:
            info = box.path.lstat()
        except FileNotFoundError:
            problems.append(
                Problem(
                    f"agent {box.agent}'s sandbox {box.path} is missing",
                    "provision the agent again or deprovision it",
                )
            )
            continue
        if not stat.S_ISDIR(info.st_mode):
            problems.append(
                Problem(
                    f"agent {box.agent}'s sandbox {box.path} is {_kind(info.st_mode)}, not a "
                    "directory",
                    "move it aside and provision the agent again",
                )
            )
            continue
        try:
            uid = pwd.getpwnam(box.unix_user).pw_uid
        except KeyError:
            problems.append(
                Problem(
                    f"agent {box.agent}'s Unix user {box.unix_user} does not exist",
                    "provision the agent again or deprovision it",
                )
            )
            continue
        if info.st_uid != uid:
            problems.append(
                Problem(
                    f"agent {box.agent}'s sandbox {box.path} belongs to uid {info.st_uid}, "
                    f"not {box.unix_user}",
                    f"chown {box.unix_user}: {box.path}",
                )
            )
        if stat.S_IMODE(info.st_mode) != 0o700:
            problems.append(
                Problem(
                    f"agent {box.agent}'s sandbox {box.path} is mode {_mode(info.st_mode)}: "
                    "other users can enter it",
                    f"chmod 700 {box.path}",
                )
            )
    return problems


def sandbox_quota(storage: str, boxes: Iterable[Sandbox]) -> list[Problem]:
    """Writes are held to each agent's storage quota at write time: sandboxes on quota volumes
    (`loop_image`), each one mounted, with its own filesystem."""
    if storage != "loop_image":
        return [
            Problem(
                f"AGENTS_SANDBOX_STORAGE is {storage!r}: an agent can write past its storage "
                "quota (only the periodic measurement stops its next jobs)",
                "set AGENTS_SANDBOX_STORAGE=loop_image and provision the agents again",
            )
        ]
    problems: list[Problem] = []
    for box in boxes:
        volume = private_tmp.volume_of(box.unix_user)
        try:
            on_volume = volume is not None and box.path.lstat().st_dev == volume.lstat().st_dev
        except OSError:
            on_volume = False
        if not on_volume:
            problems.append(
                Problem(
                    f"agent {box.agent}'s sandbox {box.path} is not on its quota volume "
                    f"({private_tmp.VOLUMES / box.unix_user})",
                    "provision the agent again (it mounts the volume; after a reboot too)",
                )
            )
    return problems


def _mode(st_mode: int) -> str:
    return f"{stat.S_IMODE(st_mode):04o}"


def _kind(st_mode: int) -> str:
    if stat.S_ISLNK(st_mode):
        return "a link"
    if stat.S_ISDIR(st_mode):
        return "a directory"
    if stat.S_ISREG(st_mode):
        return "a file"
    return "a special file"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# --- tokens the platform holds, found in an agent's config --------------------------------------

CONFIG_MAX_BYTES = 64 * 1024  # the config provisioning writes is a few hundred bytes
MAX_TOKENS_PER_CONFIG = 50
# The platform's token format (`agents.services.token_issue`); linear, on a bounded text.
_PLATFORM_TOKEN = re.compile(r"arena_[a-z]{1,16}_[A-Za-z0-9_-]{8,128}")


@dataclass(frozen=True)
class AgentConfig:
    agent: str
    path: Path
    text: str  # read by the caller, bounded (CONFIG_MAX_BYTES), links never followed


def platform_held_tokens_in_configs(
    configs: Iterable[AgentConfig], held_token_kind: Callable[[str], str | None]
) -> list[Problem]:
    """No agent's `~/.arena/config` holds a token the platform keeps for itself: its scaffold's
    (billed to the scaffold budget) or a judge's (held by the platform's evaluation job). An
    agent holding one could spend a budget that is not its own for its own research.
    `held_token_kind(token)` is the kind of the platform-held token it is, or None."""
    problems: list[Problem] = []
    for config in configs:
        for token in _PLATFORM_TOKEN.findall(config.text)[:MAX_TOKENS_PER_CONFIG]:
            kind = held_token_kind(token)
            if kind is not None:
                problems.append(
                    Problem(
                        f"agent {config.agent}'s {config.path} holds a {kind} token, which the "
                        "platform keeps for itself",
                        f"revoke it (a new run or evaluation issues another) and provision "
                        f"{config.agent} again to rewrite its config",
                    )
                )
    return problems


# --- the code scorer ----------------------------------------------------------------------


def untrusted_code_confined(environ: Mapping[str, str]) -> list[Problem]:
    """The developer's setting that lets answers run without the namespaces is off
    (evalsuite/untrusted/)."""
    from evalsuite.untrusted import ALLOW_UNCONFINED

    if environ.get(ALLOW_UNCONFINED, "") != "1":
        return []
    return [
        Problem(
            f"{ALLOW_UNCONFINED}=1: code answers may run as the platform's user, on the host's "
            "network, and their verdicts are not trustworthy",
            f"unset {ALLOW_UNCONFINED} (a developer's setting) and run evaluations as root",
        )
    ]
