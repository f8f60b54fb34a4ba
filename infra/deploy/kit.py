"""`infra/deploy/up|down|status|ctl`: the arena behind nginx on this machine, supervised.

`up` checks the static files and the migrations, writes a supervisord and an nginx
configuration into the deploy folder, starts supervisord with N daphne workers (one Unix
socket each), the phase worker and the accounting sync, starts nginx in front of them, and
returns once every worker has answered through nginx. `down` stops all of it and is safe to
run twice. See infra/deploy/README.md.

Two folders:
- the deploy folder (`ARENA_DEPLOY_DIR`, default var/deploy): configs, logs, pid files, the
  supervisor's control socket and `state.json`; private (0700), since the programs'
  environment (database password, secrets) is written there;
- the public runtime folder (/run/rsi-arena/<id> as root): the workers' sockets, in a folder
  only root and nginx's group can enter, the static files and nginx's temporary files, which
  nginx's own user (www-data) must reach.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from infra.deploy.layout import (
    DATABASE_POOL_PER_PROCESS,
    DEFAULT_TRUSTED_PROXIES,
    DEPLOY_ID_VARIABLE,
    NGINX_USER,
    PHASES_PROGRAM,
    PUBLIC_RUNTIME_ROOT,
    RECORDED_NAMES,
    RECORDED_PREFIXES,
    ROOT,
    SYNC_PROGRAM,
    DeployError,
    Layout,
    State,
)
from infra.deploy.nginx import Site, local_config
from infra.deploy.programs import (
    leftover_programs,
    pid_alive,
    program_states,
    read_pid,
    supervisor_config,
    supervisorctl,
)


def log(message: str) -> None:
    print(f"[deploy] {message}", flush=True)


def python_executable() -> str:
    return os.environ.get("ARENA_PYTHON") or sys.executable


def _wait(what: str, ready: Callable[[], bool], timeout: float, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise DeployError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _run_checked(what: str, command: list[str], *, env: dict[str, str], timeout: float) -> str:
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise DeployError(f"{what} took longer than {timeout:g} s: {shlex.join(command)}") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-3000:]
        raise DeployError(f"{what} failed ({shlex.join(command)}):\n{output}")
    return done.stdout


def _prepare_public_dir(layout: Layout) -> str | None:
    """The public folder, owned so that nginx's user reaches what it must and no agent's user
    reaches the sockets. Returns the user nginx's workers run as (None: as the caller)."""
    root = os.geteuid() == 0
    nginx_user = NGINX_USER if root else None
    for folder in (layout.public_dir, layout.static_root, layout.socket_dir, layout.nginx_temp):
        folder.mkdir(parents=True, exist_ok=True)
    if root:
        os.chmod(PUBLIC_RUNTIME_ROOT, 0o755)
        os.chmod(layout.public_dir, 0o755)
        os.chmod(layout.static_root, 0o755)
        nginx_gid = grp.getgrnam(NGINX_USER).gr_gid
        # Sockets: root and nginx's group only. Agents' users cannot connect, so they cannot
        # reach a worker directly and write their own X-Forwarded-For.
        os.chown(layout.socket_dir, 0, nginx_gid)
        os.chmod(layout.socket_dir, 0o750)
        nginx_uid = pwd.getpwnam(NGINX_USER).pw_uid
        os.chown(layout.nginx_temp, nginx_uid, nginx_gid)
        os.chmod(layout.nginx_temp, 0o700)
    else:
        os.chmod(layout.socket_dir, 0o700)
    return nginx_user


def _program_environment(layout: Layout) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
    env.setdefault("ARENA_TRUSTED_PROXIES", DEFAULT_TRUSTED_PROXIES)
    env.setdefault("ARENA_DATABASE_POOL", str(DATABASE_POOL_PER_PROCESS))
    env["ARENA_STATIC_ROOT"] = str(layout.static_root)
    env["PYTHONUNBUFFERED"] = "1"
    # Marks this kit's programs, so `down` finds any a dead supervisord left behind.
    env[DEPLOY_ID_VARIABLE] = layout.public_dir.name
    return env


def _record_environment(layout: Layout, env: dict[str, str]) -> None:
    lines = [
        f"{name}={shlex.quote(value)}"
        for name, value in sorted(env.items())
        if name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES
    ]
    path = layout.deploy_dir / "environment"
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)


def _answers_from(access_log: Path, offset: int) -> dict[str, int]:
    """Upstream -> last status seen in nginx's access log after `offset`."""
    seen: dict[str, int] = {}
    with access_log.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            line = raw.decode("utf-8", "replace")
            upstream = re.search(r"upstream=(\S+(?:, \S+)*) upstream_status=(\S+(?:, \S+)*)", line)
            if not upstream:
                continue
            # After a failed try nginx lists every upstream it tried: the last one answered.
            address = upstream.group(1).split(", ")[-1]
            status = upstream.group(2).split(", ")[-1]
            if status.isdigit():
                seen[address] = int(status)
    return seen


def _wait_for_every_worker(layout: Layout, url: str, workers: int, timeout: float) -> None:
    wanted = {f"unix:{layout.worker_socket(index)}" for index in range(workers)}
    offset = layout.nginx_access_log.stat().st_size if layout.nginx_access_log.exists() else 0
    last_error = ""

    def every_worker_answered() -> bool:
        nonlocal last_error
        try:
            with urllib.request.urlopen(url + "/", timeout=5) as reply:
                reply.read()
        except (urllib.error.URLError, OSError) as error:
            last_error = str(error)
            return False
        if not layout.nginx_access_log.exists():
            return False
        answered = {
            a
            for a, status in _answers_from(layout.nginx_access_log, offset).items()
            if status == 200
        }
        return wanted <= answered

    try:
        _wait(f"every worker to answer {url}/ through nginx", every_worker_answered, timeout, 0.05)
    except DeployError as error:
        answered = (
            _answers_from(layout.nginx_access_log, offset)
            if layout.nginx_access_log.exists()
            else {}
        )
        raise DeployError(
            f"{error}; answers by worker: {answered or 'none'}"
            + (f"; last error: {last_error}" if last_error else "")
            + f"; see {layout.logs}"
        ) from None


def up(
    *,
    workers: int,
    port: int,
    host: str,
    sync_every: int,
    timeout: float,
    migrate: bool,
    gateway_port: int | None,
) -> State:
    layout = Layout.of()
    if read_pid(layout.supervisor_pid_file) or read_pid(layout.nginx_pid_file):
        raise DeployError(
            f"the arena is already up from {layout.deploy_dir}; run infra/deploy/down first"
        )
    leftovers = leftover_programs(layout)
    if leftovers:
        raise DeployError(
            f"programs of an earlier start still run without their supervisor (pids {leftovers});"
            " run infra/deploy/down first"
        )
    for tool in ("nginx", "supervisord", "supervisorctl"):
        if shutil.which(tool) is None:
            raise DeployError(
                f"{tool} is not installed (infra/scripts/test-services.sh installs Debian's nginx and supervisor)"
            )
    for what, wanted in (("--port", port), ("--gateway-port", gateway_port)):
        if wanted is not None and not _port_free(host, wanted):
            raise DeployError(f"{host}:{wanted} ({what}) is already in use")
    env = _program_environment(layout)
    if workers > 1 and not env.get("REDIS_URL"):
        raise DeployError(
            "REDIS_URL is not set: with more than one worker the live board and the battles need the "
            "Redis channel layer (an in-memory layer is per process)"
        )
    layout.deploy_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.deploy_dir, 0o700)
    layout.logs.mkdir(exist_ok=True)
    nginx_user = _prepare_public_dir(layout)
    _record_environment(layout, env)
    python = python_executable()
    started = time.monotonic()

    log(
        "collecting static files"
        + (", applying migrations" if migrate else ", checking migrations")
    )
    _run_checked(
        "collecting static files and migrating",
        [python, "-m", "infra.deploy.prepare", *([] if migrate else ["--no-migrate"])],
        env=env,
        timeout=300,
    )

    for index in range(workers):
        layout.worker_socket(index).unlink(missing_ok=True)
    layout.supervisor_config.write_text(
        supervisor_config(layout, workers=workers, python=python, sync_every=sync_every)
    )
    log(f"starting supervisord: {workers} web workers, the phase worker, the sync")
    # In the foreground of a session of its own (not through supervisord's own fork), so no
    # pipe of ours stays open in the daemon and its output goes to a log file.
    with (layout.logs / "supervisord.out").open("ab") as output:
        supervisor = subprocess.Popen(
            ["supervisord", "--nodaemon", "-c", str(layout.supervisor_config)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def control_socket_ready() -> bool:
            if supervisor.poll() is not None:
                raise DeployError(
                    f"supervisord exited with {supervisor.returncode}; see {layout.logs / 'supervisord.out'}"
                )
            return supervisorctl(layout, "pid").returncode == 0

        _wait("supervisord's control socket", control_socket_ready, 15)
        programs = [f"web:web-{index}" for index in range(workers)] + [PHASES_PROGRAM, SYNC_PROGRAM]

        def all_running() -> bool:
            states = program_states(layout)
            failed = [
                name for name in programs if states.get(name, ("",))[0] in {"FATAL", "BACKOFF"}
            ]
            if failed:
                raise DeployError(f"{', '.join(failed)} did not start; see {layout.logs}")
            return all(states.get(name, ("",))[0] == "RUNNING" for name in programs)

        _wait("every program to run", all_running, timeout, 0.2)
        _wait(
            "the workers' sockets",
            lambda: all(layout.worker_socket(index).is_socket() for index in range(workers)),
            timeout,
        )

        listen = f"{host}:{port}"
        site = Site(
            sockets=[layout.worker_socket(index) for index in range(workers)],
            static_root=layout.static_root,
            listen=listen,
            gateway_listen=f"{host}:{gateway_port}" if gateway_port else "",
        )
        layout.nginx_config.write_text(
            local_config(
                site,
                pid_file=layout.nginx_pid_file,
                error_log=layout.logs / "nginx-error.log",
                access_log=layout.nginx_access_log,
                temp_dir=layout.nginx_temp,
                user=nginx_user,
            )
        )
        nginx = [
            "nginx",
            "-c",
            str(layout.nginx_config),
            "-p",
            str(layout.deploy_dir),
            "-e",
            str(layout.logs / "nginx-error.log"),
        ]
        _run_checked("nginx's configuration test", [*nginx, "-t", "-q"], env=env, timeout=30)
        log(f"starting nginx on {listen}")
        with (layout.logs / "nginx.out").open("ab") as output:
            # nginx forks its daemon and returns; the daemon inherits no pipe of ours.
            started_nginx = subprocess.run(
                nginx,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=30,
            )
        if started_nginx.returncode != 0:
            raise DeployError(f"nginx did not start: {_tail(layout.logs / 'nginx-error.log')}")
        _wait("nginx's pid file", lambda: read_pid(layout.nginx_pid_file) is not None, 10)
        url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
        _wait_for_every_worker(layout, url, workers, timeout)
    except BaseException:
        log("start failed; stopping what was started")
        down(quiet=True)
        raise

    state = State(
        url=url,
        port=port,
        workers=workers,
        deploy_dir=str(layout.deploy_dir),
        public_dir=str(layout.public_dir),
        sockets=[str(layout.worker_socket(index)) for index in range(workers)],
        supervisor_config=str(layout.supervisor_config),
        nginx_access_log=str(layout.nginx_access_log),
        started_at=time.time(),
    )
    layout.state_file.write_text(json.dumps(asdict(state), indent=2) + "\n")
    log(f"up in {time.monotonic() - started:.1f} s")
    print_status(layout)
    return state


def print_status(layout: Layout) -> bool:
    """Print what runs; True when supervisord, every program and nginx run."""
    supervisor_pid = read_pid(layout.supervisor_pid_file)
    nginx_pid = read_pid(layout.nginx_pid_file)
    state = json.loads(layout.state_file.read_text()) if layout.state_file.exists() else {}
    if supervisor_pid is None and nginx_pid is None:
        print(f"not running (deploy folder {layout.deploy_dir})")
        return False
    healthy = supervisor_pid is not None and nginx_pid is not None
    print(f"url          {state.get('url', '?')}  (nginx master pid {nginx_pid or 'NOT RUNNING'})")
    print(f"supervisord  pid {supervisor_pid or 'NOT RUNNING'}  (control: infra/deploy/ctl status)")
    if supervisor_pid is not None:
        sockets = state.get("sockets", [])
        for name, (program_state, pid) in sorted(program_states(layout).items()):
            where = ""
            if name.startswith("web:web-"):
                index = int(name.rsplit("-", 1)[1])
                where = f"  {sockets[index]}" if index < len(sockets) else ""
            print(f"{name:<12} {program_state:<9} pid {pid or '-'}{where}")
            healthy = healthy and program_state == "RUNNING"
    print(f"logs         {layout.logs}")
    return healthy


def _stop_pid(pid: int, sig: int, timeout: float) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        _wait(f"pid {pid} to end", lambda: not pid_alive(pid), 10)


def down(*, quiet: bool = False) -> None:
    layout = Layout.of()
    nginx_pid = read_pid(layout.nginx_pid_file)
    supervisor_pid = read_pid(layout.supervisor_pid_file)
    if nginx_pid is not None:
        if not quiet:
            log(f"stopping nginx (pid {nginx_pid})")
        _stop_pid(nginx_pid, signal.SIGTERM, 10)  # fast shutdown: open WebSockets end now
    if supervisor_pid is not None:
        if not quiet:
            log(f"stopping supervisord (pid {supervisor_pid}) and its programs")
        # supervisord stops each program (TERM, KILL after stopwaitsecs) before it exits.
        _stop_pid(supervisor_pid, signal.SIGTERM, 40)
    leftovers = leftover_programs(layout)
    if leftovers and not quiet:
        log(f"stopping programs left without their supervisor: pids {leftovers}")
    for pid in leftovers:
        _stop_pid(pid, signal.SIGTERM, 15)
    for path in (
        layout.nginx_pid_file,
        layout.supervisor_pid_file,
        layout.state_file,
        layout.supervisor_socket,
    ):
        path.unlink(missing_ok=True)
    # The sockets, the collected static files (in /run, memory) and nginx's temporary files:
    # `up` makes them again.
    shutil.rmtree(layout.public_dir, ignore_errors=True)
    if not quiet:
        log(
            "down"
            if nginx_pid or supervisor_pid or leftovers
            else f"nothing was running (deploy folder {layout.deploy_dir})"
        )
