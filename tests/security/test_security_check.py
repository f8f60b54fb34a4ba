"""`python manage.py security check`: each check catches a problem planted for it, and the
command exits non-zero on any problem and 0 on a clean deployment."""

from __future__ import annotations

import http.server
import os
import pwd
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path

import psutil
import pytest
from django.core.management import CommandError, call_command

from agents.firewall import (
    NftablesFirewall,
    NoFirewall,
    merge_ports,
    parse_ports,
    platform_ports,
    ruleset,
)
from agents.models import Agent
from agents.sandbox_storage import LoopImageStorage
from infra.deploy.nginx import Site, local_config
from security import checks, deployment
from security.checks import Sandbox, Server
from tests.conftest import _free_port
from tests.factories import contestant

ROOT = Path(__file__).resolve().parents[2]
NOBODY = pwd.getpwnam("nobody").pw_uid
TEST_TABLE = "rsi_arena_check_test"
PORTS = [(8000, 8000), (5432, 5432), (8100, 8199)]


# --- files ----------------------------------------------------------------------------------


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    """A clean VAR_DIR: private, a 0600 secret, a private tree of logs."""
    var = tmp_path / "var"
    (var / "evals" / "phase-1").mkdir(parents=True)
    (var / "evals" / "phase-1" / "items.jsonl").write_text("{}\n")
    (var / "secret_key").write_text(secrets.token_urlsafe(50))
    subprocess.run(["chmod", "-R", "go-rwx", str(var)], check=True)
    return var


def test_a_private_var_dir_is_clean(var_dir):
    assert checks.private_files(var_dir) == []


def test_files_deep_in_a_private_var_dir_are_out_of_reach_whatever_their_mode(var_dir):
    (var_dir / "evals" / "phase-1" / "items.jsonl").chmod(0o644)
    assert checks.private_files(var_dir) == []


def test_a_link_in_var_dir_is_a_problem_and_is_not_followed(var_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (var_dir / "models").symlink_to(outside)
    [problem] = checks.private_files(var_dir)
    assert f"{var_dir / 'models'} is a link to {outside}" in problem.what


def test_hard_links_open_to_other_users_are_a_problem(var_dir, tmp_path):
    setting = tmp_path / "protected_hardlinks"
    setting.write_text("0\n")
    [problem] = checks.private_files(var_dir, protected_hardlinks=setting)
    assert "fs.protected_hardlinks is 0" in problem.what
    assert "sysctl -w fs.protected_hardlinks=1" in problem.fix


def test_an_open_var_dir_and_a_loose_secret_are_problems(var_dir):
    var_dir.chmod(0o755)
    (var_dir / "secret_key").chmod(0o640)
    lines = [str(problem) for problem in checks.private_files(var_dir)]
    assert any(f"{var_dir} is mode 0755" in line for line in lines)
    assert any("secret_key" in line and "0640" in line for line in lines)


# --- Slurm ----------------------------------------------------------------------------------

GOOD_CONFIG = """\
AccountingStorageEnforce = associations,limits,qos,safe
PriorityFlags           = MAX_TRES
ProctrackType           = proctrack/cgroup
TaskPlugin              = task/cgroup,task/affinity
ConstrainRAMSpace       = yes
"""
GOOD_PARTITION = "PartitionName=gpu Nodes=n[1-8] TRESBillingWeights=CPU=1,Mem=0.000125,GRES/gpu=1\n"


def test_the_expected_slurm_config_is_clean():
    assert checks.slurm_enforcement(config=GOOD_CONFIG, partitions=GOOD_PARTITION) == []


@pytest.mark.parametrize(
    "planted,expected",
    [
        (("associations,limits,qos,safe", "associations,limits"), "lacks qos,safe"),
        (("proctrack/cgroup", "proctrack/linuxproc"), "ProctrackType = proctrack/linuxproc"),
        (("task/cgroup,task/affinity", "task/none"), "lacks task/cgroup"),
        (
            ("ConstrainRAMSpace       = yes", "ConstrainRAMSpace       = no"),
            "ConstrainRAMSpace = no",
        ),
    ],
)
def test_a_weakened_slurm_config_is_a_problem(planted, expected):
    config = GOOD_CONFIG.replace(*planted)
    [problem] = checks.slurm_enforcement(config=config, partitions=GOOD_PARTITION)
    assert expected in problem.what


def test_a_partition_that_bills_gpus_only_is_a_problem():
    partition = GOOD_PARTITION.replace("CPU=1,Mem=0.000125,", "CPU=0,")
    [problem] = checks.slurm_enforcement(config=GOOD_CONFIG, partitions=partition)
    assert "bills nothing for CPU,Mem" in problem.what


@pytest.mark.skipif(not checks.slurm_running(), reason="no local Slurm cluster")
def test_the_local_cluster_passes():
    run = lambda *args: subprocess.run(["scontrol", *args], capture_output=True, text=True).stdout  # noqa: E731
    problems = checks.slurm_enforcement(
        config=run("show", "config"), partitions=run("show", "partition", "-o")
    )
    assert problems == []


# --- secrets --------------------------------------------------------------------------------


def _slurmdbd_conf(tmp_path: Path, password: str, mode: int = 0o600) -> Path:
    conf = tmp_path / "slurmdbd.conf"
    conf.write_text(f"StorageUser=slurm\nStoragePass={password}\nStorageLoc=slurm_acct_db\n")
    conf.chmod(mode)
    return conf


STRONG = {"ARENA_SECRET_KEY": secrets.token_urlsafe(50)}


def test_generated_secrets_are_clean(tmp_path):
    conf = _slurmdbd_conf(tmp_path, secrets.token_hex(24))
    assert checks.default_secrets(secrets=STRONG, slurmdbd_conf=conf, root_only=[conf]) == []


def test_the_old_slurmdbd_password_is_a_problem(tmp_path):
    conf = _slurmdbd_conf(tmp_path, "arena-slurm-local")
    [problem] = checks.default_secrets(secrets=STRONG, slurmdbd_conf=conf, root_only=[])
    assert "StoragePass is still the old fixed default" in problem.what
    assert "infra/slurm/setup.sh" in problem.fix


def test_a_readable_slurmdbd_conf_is_a_problem(tmp_path):
    conf = _slurmdbd_conf(tmp_path, secrets.token_hex(24), mode=0o644)
    [problem] = checks.default_secrets(secrets=STRONG, slurmdbd_conf=conf, root_only=[])
    assert "mode 0644" in problem.what


@pytest.mark.parametrize("value", ["django-insecure-abc", "short", "changeme" * 8])
def test_a_placeholder_secret_key_is_a_problem(tmp_path, value):
    [problem] = checks.default_secrets(
        secrets={"ARENA_SECRET_KEY": value}, slurmdbd_conf=tmp_path / "none", root_only=[]
    )
    assert "ARENA_SECRET_KEY" in problem.what


# --- firewall -------------------------------------------------------------------------------


@pytest.fixture
def test_firewall() -> Iterator[NftablesFirewall]:
    """A table of its own, so the check is tried without touching the deployment's."""
    firewall = NftablesFirewall(table=TEST_TABLE, ports=PORTS)
    yield firewall
    subprocess.run(["nft", "delete", "table", "inet", TEST_TABLE], check=False, capture_output=True)


def _firewall_problems(firewall, *, ports=PORTS, gateway=8001) -> list[str]:
    return [
        str(problem)
        for problem in checks.firewall_rules(
            firewall=firewall, agent_users=["nobody"], platform_ports=ports, gateway_port=gateway
        )
    ]


@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_an_installed_firewall_is_clean(test_firewall):
    test_firewall.install(uids=[NOBODY])
    assert _firewall_problems(test_firewall) == []


@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_a_missing_table_is_a_problem(test_firewall):
    [problem] = _firewall_problems(test_firewall)
    assert "not loaded" in problem and "infra/firewall/setup.sh" in problem


@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_an_agent_missing_from_the_set_is_a_problem(test_firewall):
    test_firewall.install(uids=[NOBODY])
    test_firewall.unblock(NOBODY)
    [problem] = _firewall_problems(test_firewall)
    assert f"agent user nobody (uid {NOBODY}) is not in the firewall's agents set" in problem


@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_an_uncovered_port_and_a_closed_gateway_are_problems(test_firewall):
    test_firewall.install(uids=[NOBODY])
    problems = _firewall_problems(test_firewall, ports=[*PORTS, (6379, 6379)], gateway=8150)
    assert any("platform ports 6379 are open to agents" in line for line in problems)
    assert any("port 8150 (the agent gateway) is closed to agents" in line for line in problems)


def test_blocking_an_agent_reloads_a_table_loaded_with_other_ports(test_firewall):
    """A table from before an upgrade that added ports (8080, 80, 443) gets them at the next
    provisioning, keeping the agents blocked already. The uids are no one's, so nobody's
    connections are touched."""
    earlier, later = 3_999_998, 3_999_999
    test_firewall.install(uids=[earlier])
    upgraded = NftablesFirewall(table=TEST_TABLE, ports=[*PORTS, (8080, 8080)])
    upgraded.block(later)
    state = upgraded.state()
    assert state.covers(8080) and state.rejects
    assert {earlier, later} <= state.uids


def test_no_firewall_is_a_problem():
    [problem] = _firewall_problems(NoFirewall())
    assert "AGENTS_FIREWALL=nftables" in problem


def test_the_shipped_ruleset_is_what_the_default_settings_install():
    """infra/firewall/setup.sh loads rsi-arena.nft without Python: it must not drift."""
    defaults = merge_ports(
        parse_ports(["80", "443", "8000", "8080", "5432", "6379", "3306", "6819", "8100-8199"])
    )
    shipped = (ROOT / "infra" / "firewall" / "rsi-arena.nft").read_text()
    assert shipped == ruleset(table="rsi_arena", ports=defaults)
    assert platform_ports() == defaults  # this machine's settings (PostgreSQL and Redis here)


# --- the ports the site really listens on ----------------------------------------------------


@pytest.fixture
def site_nginx(tmp_path) -> Iterator[Callable[..., int]]:
    """`site_nginx(port=P, gateway=G)` starts nginx serving the arena as infra/deploy/up does
    (the kit's own configuration, from the checkout) on P (a free port if None); returns P."""
    started: list[Path] = []

    def start(*, port: int | None = None, gateway: int | None = None) -> int:
        port = port or _free_port()
        folder = tmp_path / f"nginx-{port}"
        (folder / "static").mkdir(parents=True)
        site = Site(
            sockets=[folder / "web-0.sock"],
            static_root=folder / "static",
            listen=f"127.0.0.1:{port}",
            gateway_listen=f"127.0.0.1:{gateway}" if gateway else "",
        )
        config = folder / "nginx.conf"
        config.write_text(
            local_config(
                site, pid_file=folder / "nginx.pid", error_log=folder / "error.log",
                access_log=folder / "access.log", temp_dir=folder, user=None,
            )
        )  # fmt: skip
        command = ["nginx", "-c", str(config), "-p", str(folder), "-e", str(folder / "error.log")]
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=30)
        started.append(folder)
        return port

    yield start
    for folder in started:
        pid = int((folder / "nginx.pid").read_text())
        process = psutil.Process(pid)
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def deployment_table(settings) -> Iterator[Callable[..., None]]:
    """Loads this deployment's table (a test table of its own) with `ports`, blocking no uid:
    nobody's connections are untouched, so the tests need not run alone."""
    settings.AGENTS_FIREWALL = "nftables"
    settings.AGENTS_FIREWALL_TABLE = TEST_TABLE
    yield lambda ports: NftablesFirewall(table=TEST_TABLE, ports=ports).install()
    subprocess.run(["nft", "delete", "table", "inet", TEST_TABLE], check=False, capture_output=True)


def _site_port_problems() -> list[str]:
    return [str(problem) for problem in deployment._site_ports()]


def test_a_port_the_site_listens_on_outside_the_firewall_is_a_problem(deployment_table, site_nginx):
    """Issue 25, finding 10: the kit's nginx on a port the settings forgot (8080 under the
    old defaults) served the voting site to agents, and the check compared the rules only with
    the settings."""
    deployment_table(PORTS)
    port = site_nginx()
    problems = _site_port_problems()
    assert any(
        f"port {port} (nginx (pid " in line and "open to agents" in line for line in problems
    ), problems


def test_site_ports_in_the_firewall_and_the_gateway_port_are_clean(
    deployment_table, site_nginx, settings
):
    settings.AGENTS_GATEWAY_PORT = gateway = _free_port()
    port = _free_port()
    deployment_table([*PORTS, (port, port)])
    site_nginx(port=port, gateway=gateway)
    problems = _site_port_problems()
    assert not any(f"port {port} " in line or f"port {gateway} " in line for line in problems)


def test_without_a_table_the_site_ports_check_is_skipped(deployment_table):
    with pytest.raises(checks.Skipped):
        deployment._site_ports()


# --- agents' nodes and the voting site -------------------------------------------------------


def test_a_node_on_another_host_outside_the_denied_networks_is_a_problem():
    nodes = {"n1": "localhost", "gpu7": "192.0.2.7"}
    [problem] = checks.agent_nodes_kept_off_voting(nodes=nodes, denied=[])
    assert "Slurm node gpu7 (192.0.2.7: 192.0.2.7)" in str(problem)
    assert "ARENA_VOTING_DENIED_NETWORKS" in str(problem)
    assert checks.agent_nodes_kept_off_voting(nodes=nodes, denied=["192.0.2.0/24"]) == []


def test_the_local_clusters_nodes_are_this_host():
    if not checks.slurm_running():
        pytest.skip("no Slurm controller here")
    assert deployment._voting_networks() == []


# --- database sockets -----------------------------------------------------------------------


def test_an_open_postgresql_socket_folder_is_a_problem(tmp_path):
    folder = tmp_path / "postgresql"
    folder.mkdir()
    folder.chmod(0o2775)
    [problem] = checks.database_sockets(postgres_dir=folder, mariadb_socket=tmp_path / "none")
    assert "every user reaches PostgreSQL's socket" in problem.what
    folder.chmod(0o2770)
    assert checks.database_sockets(postgres_dir=folder, mariadb_socket=tmp_path / "none") == []


# --- model servers --------------------------------------------------------------------------


class _ModelServer(http.server.BaseHTTPRequestHandler):
    key: str | None = None

    def do_GET(self) -> None:  # noqa: N802
        wanted = f"Bearer {self.key}" if self.key else None
        if wanted is not None and self.headers.get("Authorization") != wanted:
            self.send_response(401)
            self.end_headers()
            return
        body = b'{"data": [{"id": "/srv/checkpoints/agent_a/final"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def model_server() -> Iterator[callable]:
    started: list[http.server.ThreadingHTTPServer] = []

    def start(key: str | None) -> str:
        handler = type("Handler", (_ModelServer,), {"key": key})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_a_model_server_that_answers_without_its_key_is_a_problem(model_server):
    url = model_server(key=None)
    [problem] = checks.model_server_auth([Server("contestant-a", url, "its-key")])
    assert f"answers GET {url}/models without a key (HTTP 200)" in problem.what


def test_a_model_server_that_asks_for_its_key_is_clean(model_server):
    url = model_server(key="its-key")
    assert checks.model_server_auth([Server("contestant-a", url, "its-key")]) == []


def test_a_contestant_without_a_key_is_a_problem(model_server):
    url = model_server(key="its-key")
    [problem] = checks.model_server_auth([Server("contestant-a", url, "")])
    assert "has no api_key" in problem.what


# --- sandboxes ------------------------------------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    home = tmp_path / "agent_home"
    home.mkdir(mode=0o700)
    os.chown(home, NOBODY, -1)
    home.chmod(0o700)
    return home


def test_a_private_sandbox_is_clean(sandbox):
    assert checks.sandboxes([Sandbox("trudy", "nobody", sandbox)]) == []


def test_a_sandbox_at_0755_is_a_problem(sandbox):
    sandbox.chmod(0o755)
    [problem] = checks.sandboxes([Sandbox("trudy", "nobody", sandbox)])
    assert "mode 0755" in problem.what and problem.fix == f"chmod 700 {sandbox}"


def test_a_sandbox_owned_by_someone_else_is_a_problem(sandbox):
    os.chown(sandbox, 0, -1)
    [problem] = checks.sandboxes([Sandbox("trudy", "nobody", sandbox)])
    assert problem.fix == f"chown nobody: {sandbox}"


def test_a_sandbox_that_is_a_link_is_a_problem_and_not_followed(sandbox, tmp_path):
    link = tmp_path / "link_home"
    link.symlink_to(sandbox)
    [problem] = checks.sandboxes([Sandbox("trudy", "nobody", link)])
    assert "is a link, not a directory" in problem.what


@pytest.fixture
def sandbox_on_volume(sandbox: Path) -> Iterator[Path]:
    """`sandbox` as production provisions it: on a 1 GiB quota volume of its own."""
    storage = LoopImageStorage()
    storage.attach(user="nobody", home=sandbox, quota_gib=1)
    yield sandbox
    storage.remove(user="nobody", home=sandbox)


def test_sandboxes_on_their_mounted_quota_volumes_are_clean(sandbox_on_volume):
    assert checks.sandbox_quota("loop_image", [Sandbox("trudy", "nobody", sandbox_on_volume)]) == []


def test_storage_without_a_write_time_quota_is_a_problem(sandbox):
    [problem] = checks.sandbox_quota("plain_directory", [Sandbox("trudy", "nobody", sandbox)])
    assert "write past its storage quota" in problem.what
    assert problem.fix.startswith("set AGENTS_SANDBOX_STORAGE=loop_image")


def test_a_sandbox_off_its_quota_volume_is_a_problem(sandbox):
    # A plain folder while the deployment says loop_image (e.g. not mounted after a reboot).
    [problem] = checks.sandbox_quota("loop_image", [Sandbox("trudy", "nobody", sandbox)])
    assert "is not on its quota volume" in problem.what


# --- the command ----------------------------------------------------------------------------


@pytest.fixture
def clean_deployment(settings, var_dir, test_firewall):
    """This machine's Slurm and secrets, a private VAR_DIR, an installed firewall and quota
    volumes for sandboxes."""
    settings.VAR_DIR = var_dir
    settings.AGENTS_SANDBOX_STORAGE = "loop_image"
    settings.AGENTS_FIREWALL = "nftables"
    settings.AGENTS_FIREWALL_TABLE = TEST_TABLE
    call_command("security", "firewall", stdout=StringIO())
    return settings


@pytest.mark.django_db
@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_the_command_exits_0_on_a_clean_deployment(clean_deployment, sandbox_on_volume):
    Agent.objects.create(name="trudy", unix_user="nobody", sandbox=str(sandbox_on_volume))
    call_command("security", "firewall", stdout=StringIO())  # trudy's uid joins the set
    out = StringIO()
    call_command("security", "check", stdout=out)
    assert "no problems found" in out.getvalue()
    assert "PROBLEM" not in out.getvalue()


@pytest.mark.django_db
@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_the_command_exits_1_with_one_line_per_problem(
    clean_deployment, sandbox, model_server, site_nginx
):
    Agent.objects.create(name="trudy", unix_user="nobody", sandbox=str(sandbox))
    site_port = site_nginx()  # the kit on a port the firewall does not cover
    sandbox.chmod(0o755)
    server = contestant("open-server")
    server.base_url, server.api_key = model_server(key=None), "its-key"
    server.save()
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("security", "check", stdout=out)
    assert failed.value.returncode == 1
    lines = [line for line in out.getvalue().splitlines() if line.startswith("PROBLEM")]
    assert any("sandbox" in line and "chmod 700" in line for line in lines)
    assert any("firewall's agents set" in line for line in lines)  # trudy came after the sync
    assert any("open-server" in line and "without a key" in line for line in lines)
    assert any(f"port {site_port} (nginx" in line and "open to agents" in line for line in lines)
    assert all(" -- fix: " in line for line in lines)


@pytest.mark.django_db
@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_without_slurm_the_local_backend_skips_the_slurm_check(clean_deployment, monkeypatch):
    clean_deployment.CLUSTER_BACKEND = "local"
    monkeypatch.setattr(checks, "slurm_running", lambda: False)
    out = StringIO()
    call_command("security", "check", stdout=out)
    assert (
        "skipped  Slurm enforcement, billing and cgroups: CLUSTER_BACKEND is local"
        in out.getvalue()
    )


@pytest.mark.django_db
@pytest.mark.serial  # blocks nobody in a real nftables table: other tests connect as nobody
def test_without_slurm_the_slurm_backend_is_a_problem(clean_deployment, monkeypatch):
    clean_deployment.CLUSTER_BACKEND = "slurm"
    monkeypatch.setattr(checks, "slurm_running", lambda: False)
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("security", "check", stdout=out)
    assert "finds no controller" in out.getvalue()


# --- tokens the platform holds --------------------------------------------------------------


@pytest.mark.django_db
def test_a_scaffold_or_judge_token_in_an_agents_config_is_a_problem(sandbox):
    from agents.services import judge_token_issue, scaffold_token_issue, token_issue
    from security.deployment import _platform_tokens_in_configs

    trudy = Agent.objects.create(name="trudy", unix_user="nobody", sandbox=str(sandbox))
    (sandbox / ".arena").mkdir()
    config = sandbox / ".arena" / "config"
    own = f"ARENA_TOKEN={token_issue(agent=trudy, kind='api')}\nOPENAI_API_KEY={token_issue(agent=trudy, kind='proxy')}\n"
    config.write_text(own)
    assert _platform_tokens_in_configs() == []  # its own tokens belong there

    _, judge = judge_token_issue(agent=trudy)
    config.write_text(own + f"SCAFFOLD={scaffold_token_issue(agent=trudy)}\n# {judge}\n")
    problems = _platform_tokens_in_configs()
    assert [p.what for p in problems] == [
        f"agent trudy's {config} holds a scaffold token, which the platform keeps for itself",
        f"agent trudy's {config} holds a judge token, which the platform keeps for itself",
    ]


@pytest.mark.django_db
def test_a_config_that_is_a_link_or_too_large_is_not_read(sandbox, tmp_path):
    from agents.services import scaffold_token_issue
    from security.deployment import _platform_tokens_in_configs

    trudy = Agent.objects.create(name="trudy", unix_user="nobody", sandbox=str(sandbox))
    elsewhere = tmp_path / "planted"
    elsewhere.write_text(scaffold_token_issue(agent=trudy))
    (sandbox / ".arena").mkdir()
    (sandbox / ".arena" / "config").symlink_to(elsewhere)
    assert _platform_tokens_in_configs() == []  # a link is never followed

    (sandbox / ".arena" / "config").unlink()
    (sandbox / ".arena" / "config").write_text(
        "x" * checks.CONFIG_MAX_BYTES + scaffold_token_issue(agent=trudy)
    )
    assert _platform_tokens_in_configs() == []  # past the bound: not read at all


def test_the_unconfined_code_setting_is_a_problem():
    assert checks.untrusted_code_confined({}) == []
    assert checks.untrusted_code_confined({"EVALS_ALLOW_UNCONFINED_CODE": "0"}) == []
    (problem,) = checks.untrusted_code_confined({"EVALS_ALLOW_UNCONFINED_CODE": "1"})
    assert "EVALS_ALLOW_UNCONFINED_CODE" in problem.fix
