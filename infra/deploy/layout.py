"""Where the kit keeps what it runs: the private deploy folder and the public runtime folder
(see kit.py), and what `up` records in `state.json`."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DEPLOY_DIR = ROOT / "var" / "deploy"
PUBLIC_RUNTIME_ROOT = Path("/run/rsi-arena")
NGINX_USER = "www-data"
# Programs the supervisor keeps running besides the web workers.
PHASES_PROGRAM = "phases"
SYNC_PROGRAM = "sync"
# What the workers believe X-Forwarded-For from: nginx, over the sockets only it can open.
DEFAULT_TRUSTED_PROXIES = "unix"
# PostgreSQL connections each program keeps (arena/settings.py ARENA_DATABASE_POOL).
DATABASE_POOL_PER_PROCESS = 8
DEPLOY_ID_VARIABLE = "ARENA_DEPLOY_ID"
# The caller's variables written to the deploy folder's `environment` for the record (the
# programs inherit the whole environment of `up`).
RECORDED_PREFIXES = ("ARENA_", "AGENTS_", "CLUSTER_", "EVALS_", "SAFETY_", "HF_")
RECORDED_NAMES = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PATH")


class DeployError(RuntimeError):
    """Something the operator must fix; the message says what."""


@dataclass
class Layout:
    deploy_dir: Path
    public_dir: Path

    @classmethod
    def of(cls, deploy_dir: Path | None = None) -> Layout:
        deploy_dir = (
            deploy_dir or Path(os.environ.get("ARENA_DEPLOY_DIR") or DEFAULT_DEPLOY_DIR)
        ).resolve()
        if os.geteuid() == 0:
            # One public folder per deploy folder, so two kits on one machine do not meet.
            digest = hashlib.sha256(str(deploy_dir).encode()).hexdigest()[:12]
            public_dir = PUBLIC_RUNTIME_ROOT / digest
        else:
            public_dir = deploy_dir / "public"
        return cls(deploy_dir, public_dir)

    @property
    def logs(self) -> Path:
        return self.deploy_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.deploy_dir / "state.json"

    @property
    def supervisor_config(self) -> Path:
        return self.deploy_dir / "supervisord.conf"

    @property
    def supervisor_socket(self) -> Path:
        return self.deploy_dir / "supervisor.sock"

    @property
    def supervisor_pid_file(self) -> Path:
        return self.deploy_dir / "supervisord.pid"

    @property
    def nginx_config(self) -> Path:
        return self.deploy_dir / "nginx.conf"

    @property
    def nginx_pid_file(self) -> Path:
        return self.deploy_dir / "nginx.pid"

    @property
    def nginx_access_log(self) -> Path:
        return self.logs / "nginx-access.log"

    @property
    def socket_dir(self) -> Path:
        return self.public_dir / "sockets"

    @property
    def static_root(self) -> Path:
        return self.public_dir / "static"

    @property
    def nginx_temp(self) -> Path:
        return self.public_dir / "nginx-temp"

    def worker_socket(self, index: int) -> Path:
        return self.socket_dir / f"web-{index}.sock"


@dataclass
class State:
    """What `up` started, for `down`, `status`, tests and benchmarks (state.json)."""

    url: str
    port: int
    workers: int
    deploy_dir: str
    public_dir: str
    sockets: list[str]
    supervisor_config: str
    nginx_access_log: str
    started_at: float
