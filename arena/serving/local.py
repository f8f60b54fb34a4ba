"""Local serving backend: one supervised `transformers serve` process per checkpoint (CPU).

The supervisor starts the server, waits until `/health` answers, restarts it when it dies
or stops answering, and stops it cleanly (SIGTERM to its process group, then SIGKILL).
It mirrors the production shape — one OpenAI-compatible server per contestant — so the
arena cannot tell a local server from a vLLM job on a GPU node.

Agents' Unix users share this machine, so each server runs behind its own key and under an
opaque model name (arena/serving/guard.py): only the platform, which holds the key, gets an
answer, and nothing it answers names the checkpoint.

Agents can also listen on ports. The platform therefore binds each server's port itself, before
the server starts, and hands the listening socket down (`guard --fd`); it keeps it across
restarts and closes it only when the server is stopped, so the port is never free for an agent
to take while the platform may send to it. And no check ever sends the key: `/health` is asked
with a challenge only the key's holder can answer (`authorized_health`).
"""

from __future__ import annotations

import hmac
import importlib.util
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from arena.serving.client import Endpoint
from arena.serving.guard import KEY_VARIABLE, health_proof

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]


class ServerStartError(RuntimeError):
    pass


class PortTaken(ServerStartError):
    pass


def guarded_serve_command() -> list[str]:
    """`transformers serve` behind a key (arena/serving/guard.py), with this interpreter."""
    if importlib.util.find_spec("transformers") is None:
        raise ServerStartError("transformers is not installed (pip install transformers[serving])")
    return [sys.executable, "-m", "arena.serving.guard"]


def serving_secrets() -> tuple[str, str]:
    """A new server's key and opaque model name: nothing in either tells who made the model."""
    return secrets.token_urlsafe(32), f"contestant-{secrets.token_hex(8)}"


def authorized_health(base_url: str, api_key: str) -> bool:
    """Whether the server at `base_url` (no `/v1`) is up and holds `api_key`. The key is never
    sent: the server answers a fresh challenge with HMAC-SHA256(key, nonce) (guard.py), which
    whoever else listens there can neither learn from this request nor forge."""
    nonce = secrets.token_urlsafe(24)
    try:
        with urllib.request.urlopen(f"{base_url}/health?nonce={nonce}", timeout=2) as reply:
            if reply.status != 200:
                return False
            answer = json.loads(reply.read(4096))
    except (urllib.error.URLError, OSError, ValueError):
        return False
    proof = answer.get("proof") if isinstance(answer, dict) else None
    return isinstance(proof, str) and hmac.compare_digest(
        proof.encode(), health_proof(api_key, nonce).encode()
    )


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port that this process owns; PortTaken when someone
    else (an agent, say) has the port. SO_REUSEADDR only lets it bind past old connections in
    TIME_WAIT: Linux never lets a second socket bind an address a socket listens on with it
    (and `listen` fails if one got there first); no SO_REUSEPORT, which would share it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise PortTaken(f"{host}:{port} is not free ({exc.strerror or exc})") from None
    listener.set_inheritable(False)  # handed to its server only, through pass_fds
    return listener


def bind_free_listener(host: str, start: int, tries: int = 1000) -> socket.socket:
    """The first port from `start` the platform can bind itself, bound and listening."""
    for port in range(start, start + tries):
        try:
            return bind_listener(host, port)
        except PortTaken:
            continue
    raise ServerStartError(f"no free port on {host} from {start}")


@dataclass
class SupervisedModelServer:
    checkpoint: Path
    port: int
    host: str = "127.0.0.1"
    log_path: Path | None = None
    ready_timeout_s: float = 180.0
    check_interval_s: float = 1.0
    # Consecutive failed health checks of a live process before it is treated as hung.
    max_failed_checks: int = 10
    restarts: int = 0
    # The key the platform's client sends and the name it asks for; new for every server.
    api_key: str = field(default="", repr=False)
    served_model_name: str = ""
    # The port's listening socket, bound by the platform (see the module's docstring); bound
    # by `launch` when not given.
    listener: socket.socket | None = field(default=None, repr=False)
    # Where `transformers serve` puts the model: "cpu" (the arena's local servers), or
    # "cuda" for an evaluation job on a GPU node without vLLM (evalsuite/model_server.py).
    device: str = "cpu"
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _watcher: threading.Thread | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        key, name = serving_secrets()
        self.api_key = self.api_key or key
        self.served_model_name = self.served_model_name or name

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(
            base_url=f"http://{self.host}:{self.port}/v1",
            model=self.served_model_name,
            api_key=self.api_key,
        )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        """Launch, wait until healthy, then supervise. `launch` + `supervise` split the same
        work so that several servers can load their models at the same time."""
        self.launch()
        self.wait_ready()
        self.supervise()

    def launch(self) -> None:
        if not (self.checkpoint / "config.json").exists():
            raise ServerStartError(f"{self.checkpoint} is not a model checkpoint (no config.json)")
        if self.listener is None:
            self.listener = bind_listener(self.host, self.port)
        self._stopping.clear()
        self._spawn()

    def supervise(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name=f"serve:{self.port}", daemon=True)
        self._watcher.start()

    def wait_ready(self) -> None:
        """Return once the server answers, or at once when `stop()` is called meanwhile (a
        restart the watcher is waiting on must not outlive the stop by minutes)."""
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline and not self._stopping.is_set():
            process = self._process
            if process is not None and process.poll() is not None:
                raise ServerStartError(
                    f"model server for {self.checkpoint.name} exited with code {process.returncode}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            if self.healthy():
                return
            self._stopping.wait(0.25)
        if self._stopping.is_set():
            return
        raise ServerStartError(
            f"model server for {self.checkpoint.name} not ready after {self.ready_timeout_s:g} s"
        )

    def healthy(self) -> bool:
        return authorized_health(f"http://{self.host}:{self.port}", self.api_key)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            terminate_group(process, timeout_s)
        with self._lock:
            listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()  # only now may the port go to anyone else
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=timeout_s)

    def _spawn(self) -> None:
        listener = self.listener
        if listener is None:  # stopped meanwhile
            return
        command = [
            *guarded_serve_command(),
            "--served-model-name", self.served_model_name,
            # The server serves on the platform's socket; it binds nothing itself.
            "--fd", str(listener.fileno()),
            "--device", self.device,
            str(self.checkpoint),
        ]  # fmt: skip
        env = {
            **os.environ,
            # The key goes in the environment: a command line is readable by every user (ps).
            KEY_VARIABLE: self.api_key,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
            ),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            # Two tiny servers on two cores: one thread each keeps them from fighting.
            "OMP_NUM_THREADS": os.environ.get("ARENA_SERVE_THREADS", "1"),
        }
        # The log names the checkpoint: the platform's alone (0600), whatever the umask.
        output = (
            os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            if self.log_path
            else subprocess.DEVNULL
        )
        try:
            process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=(listener.fileno(),),
            )
        finally:
            if output != subprocess.DEVNULL:
                os.close(output)
        with self._lock:
            if self._stopping.is_set():  # stop() ran while this restart was starting
                terminate_group(process, 5.0)
                return
            self._process = process
        log.info(
            "started model server pid %s on port %s for %s", process.pid, self.port, self.checkpoint
        )

    def _watch(self) -> None:
        failed_checks = 0
        backoff_s = 1.0
        while not self._stopping.wait(self.check_interval_s):
            with self._lock:
                process = self._process
            if process is None:
                return
            if process.poll() is None and self.healthy():
                failed_checks, backoff_s = 0, 1.0
                continue
            if process.poll() is None:
                failed_checks += 1
                if failed_checks < self.max_failed_checks:
                    continue
                log.warning("model server on port %s stopped answering; restarting", self.port)
                terminate_group(process, 5.0)
            else:
                log.warning(
                    "model server on port %s exited with code %s; restarting",
                    self.port,
                    process.returncode,
                )
            if self._stopping.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, 30.0)
            failed_checks = 0
            self.restarts += 1
            self._spawn()
            try:
                self.wait_ready()
            except ServerStartError as exc:
                log.error("%s", exc)


def terminate_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop a server started in its own session: SIGTERM to its group, then SIGKILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass
