"""Serving backends: where contestants' model servers run.

`local` supervises one `transformers serve` process per checkpoint on this machine (the
embedded default and the test suite); `slurm` (arena/serving/slurm.py) runs a vLLM server per
contestant as a GPU job on the cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from arena.serving.client import Endpoint
from arena.serving.local import SupervisedModelServer, bind_free_listener


class ServingBackend(ABC):
    @abstractmethod
    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        """Start one server per checkpoint; return when all of them answer."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every server this backend started."""


class LocalServingBackend(ServingBackend):
    def __init__(self, *, host: str, base_port: int, log_dir: Path) -> None:
        self.host = host
        self.base_port = base_port
        self.log_dir = log_dir
        self.servers: list[SupervisedModelServer] = []

    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        started: list[SupervisedModelServer] = []
        port = self.base_port
        try:
            for checkpoint in checkpoints:
                # The platform binds the port itself and keeps it (arena/serving/local.py): a
                # port picked, let go and bound again later by the server could be an agent's
                # by then.
                listener = bind_free_listener(self.host, port)
                port = listener.getsockname()[1]
                server = SupervisedModelServer(
                    checkpoint=checkpoint.resolve(),
                    port=port,
                    host=self.host,
                    log_path=self.log_dir / f"serve-{port}.log",
                    listener=listener,
                )
                started.append(server)
                server.launch()
                port += 1
            for server in started:  # the models load concurrently
                server.wait_ready()
                server.supervise()
        except BaseException:
            for server in started:
                server.stop()
            raise
        self.servers.extend(started)
        return [server.endpoint for server in started]

    def stop(self) -> None:
        while self.servers:
            self.servers.pop().stop()


def serving_backend_from_settings() -> ServingBackend:
    name = settings.ARENA_SERVING_BACKEND
    if name == "local":
        return LocalServingBackend(
            host=settings.ARENA_SERVING_HOST,
            base_port=settings.ARENA_SERVING_BASE_PORT,
            log_dir=settings.VAR_DIR / "logs",
        )
    if name == "slurm":
        from arena.serving.slurm import SlurmServingBackend  # it builds on this module

        return SlurmServingBackend(
            command=settings.ARENA_SERVING_SLURM_COMMAND, folder=settings.VAR_DIR / "serving"
        )
    raise ImproperlyConfigured(
        f"ARENA_SERVING_BACKEND={name!r} is not a known backend (local, slurm)"
    )
