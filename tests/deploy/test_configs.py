"""The kit's configurations, checked without starting it: nginx accepts them (`nginx -t`),
the production site file is what the renderer writes, and the units and the supervisor agree
on what runs."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.deploy import cli, kit
from infra.deploy.layout import DEPLOY_ID_VARIABLE, Layout
from infra.deploy.nginx import Site, local_config, site_config
from infra.deploy.programs import leftover_programs, supervisor_config

DEPLOY = Path(kit.__file__).parent
PRODUCTION_SITE_ARGS = [
    "nginx-site", "--workers", "4", "--server-name", "arena.example.org",
    "--tls-certificate", "/etc/letsencrypt/live/arena.example.org/fullchain.pem",
    "--tls-certificate-key", "/etc/letsencrypt/live/arena.example.org/privkey.pem",
    "--gateway-listen", "8001",
]  # fmt: skip


def test_the_shipped_production_site_is_what_the_renderer_writes(capsys):
    assert cli.main(PRODUCTION_SITE_ARGS) == 0
    rendered = capsys.readouterr().out
    assert rendered == (DEPLOY / "nginx-site" / "rsi-arena.conf").read_text(), (
        "re-render infra/deploy/nginx-site/rsi-arena.conf: infra/deploy/run "
        + " ".join(PRODUCTION_SITE_ARGS)
    )


def nginx_accepts(config: str, folder: Path) -> subprocess.CompletedProcess:
    path = folder / "nginx.conf"
    path.write_text(config)
    return subprocess.run(
        ["nginx", "-t", "-q", "-c", str(path), "-p", str(folder), "-e", str(folder / "error.log")],
        capture_output=True,
        text=True,
        timeout=30,
    )


def wrapped(folder: Path, site: Site) -> str:
    return local_config(
        site,
        pid_file=folder / "nginx.pid",
        error_log=folder / "error.log",
        access_log=folder / "access.log",
        temp_dir=folder,
        user=None,
    )


def test_nginx_accepts_the_local_config_with_the_gateway(tmp_path: Path):
    site = Site(
        sockets=[tmp_path / "web-0.sock", tmp_path / "web-1.sock"],
        static_root=tmp_path / "static",
        listen="127.0.0.1:8080",
        gateway_listen="127.0.0.1:8001",
    )
    checked = nginx_accepts(wrapped(tmp_path, site), tmp_path)
    assert checked.returncode == 0, checked.stderr


def test_nginx_accepts_the_tls_site(tmp_path: Path):
    certificate, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=arena.test", "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    site = Site(
        sockets=[tmp_path / "web-0.sock"],
        static_root=tmp_path / "static",
        listen="127.0.0.1:8080",
        server_name="arena.test",
        tls_certificate=certificate,
        tls_certificate_key=key,
    )
    text = wrapped(tmp_path, site).replace("listen 443 ssl", "listen 127.0.0.1:8443 ssl")
    checked = nginx_accepts(text, tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "return 301 https://" in site_config(site)


def test_the_supervisor_runs_the_workers_the_phase_worker_and_the_sync(tmp_path: Path):
    layout = Layout(deploy_dir=tmp_path, public_dir=tmp_path / "public")
    config = configparser.RawConfigParser()
    config.read_string(supervisor_config(layout, workers=3, python="/py", sync_every=60))
    assert config["group:web"]["programs"] == "web-0,web-1,web-2"
    for index in range(3):
        web = config[f"program:web-{index}"]
        assert f"unix:{layout.worker_socket(index)}:lockfile=1" in web["command"]
        assert web["autorestart"] == "true"
    # Agent runs' keepers outlive a restart of the phase worker (agents/runs/README.md).
    assert config["program:phases"]["killasgroup"] == "false"
    assert config["program:phases"]["stopasgroup"] == "false"
    assert config["program:sync"]["command"] == "/py manage.py cluster sync --every 60"


@pytest.mark.parametrize("unit", ["rsi-arena-phases.service"])
def test_the_phase_worker_unit_leaves_the_keepers_running(unit: str):
    assert "\nKillMode=process\n" in (DEPLOY / "systemd" / unit).read_text()


def test_the_web_unit_listens_where_the_production_site_sends_requests():
    unit = (DEPLOY / "systemd" / "rsi-arena-web@.service").read_text()
    site = (DEPLOY / "nginx-site" / "rsi-arena.conf").read_text()
    assert "--endpoint unix:/run/rsi-arena/web-%i.sock:lockfile=1" in unit
    assert "server unix:/run/rsi-arena/web-0.sock" in site


def test_down_ends_programs_a_killed_supervisor_left_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_DEPLOY_DIR", str(tmp_path))
    layout = Layout.of()
    marked = {**os.environ, DEPLOY_ID_VARIABLE: layout.public_dir.name}
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    orphan = subprocess.Popen([*sleep, "manage.py", "phases", "run"], env=marked)
    keeper = subprocess.Popen([*sleep, "-m", "agents.runs.keeper"], env=marked)
    unmarked = subprocess.Popen([*sleep, "manage.py", "phases", "run"])
    try:
        deadline = time.monotonic() + 10
        while orphan.pid not in leftover_programs(layout) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the child has exec'd
        assert leftover_programs(layout) == [orphan.pid]
        kit.down(quiet=True)
        assert orphan.wait(timeout=20) is not None
        assert keeper.poll() is None and unmarked.poll() is None
    finally:
        for process in (orphan, keeper, unmarked):
            process.kill()
            process.wait()
