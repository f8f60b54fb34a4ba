"""The model server an evaluation job starts for a checkpoint it evaluates itself (an agent's
on-demand run, checkpoint_job.py): vLLM on a GPU node, `transformers serve` otherwise.

`EVALS_SERVER` chooses: `auto` (vLLM when this node sees an NVIDIA GPU and vLLM is installed,
else `transformers serve`, on CUDA when a GPU is visible), `vllm` (fail when it cannot run) or
`transformers`. Both servers answer only the holder of a fresh key, under an opaque model name,
and are started and stopped the same way (`JobModelServer`).

vLLM binds its port itself, after loading the model, and agents' jobs share the node: the port
is picked free, and the server counts as up only once the port's listening socket is owned by
the server's own processes (the Slurm serving job's check, arena/serving/slurm.py
VERIFY_LISTENER) and its `/health` answers. A server that exits, or is not up in time, fails
the job with the end of its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from arena.serving.client import Endpoint
from arena.serving.local import (
    ServerStartError,
    SupervisedModelServer,
    bind_free_listener,
    serving_secrets,
    terminate_group,
)
from arena.serving.vllm import (
    KEY_VARIABLE,
    VllmOptions,
    cuda_visible,
    open_health,
    vllm_executable,
    vllm_serve_command,
)

SERVER_CHOICES = ("auto", "vllm", "transformers")
LOG_TAIL_BYTES = 2000


class JobModelServer(Protocol):
    @property
    def endpoint(self) -> Endpoint: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class ServerChoice:
    kind: str  # "vllm" or "transformers"
    device: str  # "cuda" or "cpu"
    executable: str = ""  # vLLM's, for kind "vllm"
    reason: str = ""


def server_choice(setting: str, *, cuda: bool, vllm: str | None) -> ServerChoice:
    """Which server a job runs, from the setting and what this node has (`cuda`: a GPU is
    visible; `vllm`: vLLM's executable, None when not installed)."""
    if setting not in SERVER_CHOICES:
        raise ServerStartError(f"EVALS_SERVER is {setting!r}: one of {', '.join(SERVER_CHOICES)}")
    device = "cuda" if cuda else "cpu"
    if setting == "transformers":
        return ServerChoice("transformers", device, reason="EVALS_SERVER=transformers")
    if setting == "vllm":
        if not cuda:
            raise ServerStartError("EVALS_SERVER=vllm, but this node sees no NVIDIA GPU")
        if vllm is None:
            raise ServerStartError(
                "EVALS_SERVER=vllm, but vLLM is not installed on this node"
                " (set ARENA_VLLM_EXECUTABLE to its `vllm`)"
            )
        return ServerChoice("vllm", "cuda", vllm, reason="EVALS_SERVER=vllm")
    if cuda and vllm is not None:
        return ServerChoice("vllm", "cuda", vllm, reason="auto: GPU visible, vLLM installed")
    why = "no GPU visible" if not cuda else "GPU visible, vLLM not installed"
    return ServerChoice("transformers", device, reason=f"auto: {why}")


def job_model_server(
    checkpoint: Path,
    *,
    folder: Path,
    base_port: int,
    setting: str = "auto",
    vllm_options: VllmOptions | None = None,
    ready_timeout_s: float = 600,
) -> tuple[JobModelServer, ServerChoice]:
    """The server this node runs for `checkpoint` (not started), and why it was chosen."""
    choice = server_choice(setting, cuda=cuda_visible(), vllm=vllm_executable())
    log_path = folder / "serve.log"
    listener = bind_free_listener("127.0.0.1", base_port)
    if choice.kind == "vllm":
        port = listener.getsockname()[1]
        listener.close()  # vLLM binds it itself; whose socket it is gets checked once it listens
        server: JobModelServer = VllmModelServer(
            checkpoint=checkpoint,
            port=port,
            executable=choice.executable,
            log_path=log_path,
            options=vllm_options or VllmOptions(),
            ready_timeout_s=ready_timeout_s,
        )
    else:
        server = SupervisedModelServer(
            checkpoint=checkpoint,
            port=listener.getsockname()[1],
            log_path=log_path,
            listener=listener,
            ready_timeout_s=ready_timeout_s,
            device=choice.device,
        )
    return server, choice


@dataclass
class VllmModelServer:
    """One `vllm serve` process for the length of a job (no restarts: a job that loses its
    server fails, and the items already asked are unscored, never zero)."""

    checkpoint: Path
    port: int
    executable: str
    log_path: Path
    host: str = "127.0.0.1"
    options: VllmOptions = VllmOptions()
    ready_timeout_s: float = 600
    api_key: str = field(default="", repr=False)
    served_model_name: str = ""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        key, name = serving_secrets()
        self.api_key = self.api_key or key
        self.served_model_name = self.served_model_name or name

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(f"http://{self.host}:{self.port}/v1", self.served_model_name, self.api_key)

    def command(self) -> list[str]:
        return vllm_serve_command(
            self.executable,
            self.checkpoint,
            host=self.host,
            port=self.port,
            served_model_name=self.served_model_name,
            options=self.options,
        )

    def environment(self) -> dict[str, str]:
        """The server's environment: the key here, never on the command line (`ps`)."""
        return {
            **os.environ,
            KEY_VARIABLE: self.api_key,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1",
        }

    def start(self) -> None:
        if not (self.checkpoint / "config.json").exists():
            raise ServerStartError(f"{self.checkpoint} is not a model checkpoint (no config.json)")
        output = os.open(
            self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600
        )
        try:
            self._process = subprocess.Popen(
                self.command(),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        except OSError as exc:
            raise ServerStartError(
                f"vLLM could not be started ({self.executable}): {exc}"
            ) from None
        finally:
            os.close(output)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        from arena.serving.slurm import VERIFY_LISTENER

        assert self._process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            verified = subprocess.run(
                [sys.executable, "-c", VERIFY_LISTENER, str(self._process.pid), str(self.port)],
                timeout=self.ready_timeout_s,
                stdin=subprocess.DEVNULL,
                capture_output=True,
            ).returncode
        except subprocess.TimeoutExpired:
            raise self._failure(
                f"not listening on port {self.port} after {self.ready_timeout_s:g} s"
            ) from None
        if verified == 2:
            raise self._failure(f"port {self.port} was taken by another user's listener")
        if verified != 0:
            raise self._failure(self._exited())
        base = f"http://{self.host}:{self.port}"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise self._failure(self._exited())
            if open_health(base):
                return
            time.sleep(0.5)
        raise self._failure(f"/health did not answer within {self.ready_timeout_s:g} s")

    def _exited(self) -> str:
        assert self._process is not None
        code = self._process.wait(timeout=10) if self._process.poll() is None else None
        return f"exited with code {self._process.returncode if code is None else code}"

    def _failure(self, what: str) -> ServerStartError:
        return ServerStartError(
            f"vLLM server for {self.checkpoint.name} {what}; end of {self.log_path}:\n"
            f"{log_tail(self.log_path)}"
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            terminate_group(process, timeout_s)


def log_tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    """The last `size` bytes of a log (bounded: a server can write gigabytes)."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - size))
            return file.read(size).decode(errors="replace")
    except OSError:
        return "(no log)"
