"""Serving backends: where contestants' model servers run.

`local` supervises one `transformers serve` process per checkpoint on this machine (the
embedded default and the test suite); `slurm` (arena/serving/slurm.py) runs a vLLM server per
contestant as a GPU job on the cluster. Which one runs is the settings' choice
(arena/serving/backend_choice.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from arena.serving.client import Endpoint
from arena.serving.local import SupervisedModelServer, bind_free_listener


@dataclass(frozen=True)
class ServerChange:
    """Something that happened to a served model's server, for the organizers: `kind` is one of
    CHANGE_KINDS, `reason` why (in words), `detail` which jobs and addresses."""

    kind: str
    reason: str
    detail: str = ""


# What `maintain` reports, in the order a replacement goes through them.
LOST = "lost"  # the server stopped answering or its job ended: the contestant is withdrawn
REPLACEMENT_STARTED = "replacement started"
REPLACEMENT_FAILED = "replacement failed"  # tried again on the next round
REPLACEMENT_READY = "replacement ready"
SWAPPED = "swapped"  # the contestant now points at the replacement
OLD_STOPPED = "old server stopped"  # after the battles on it finished, or the drain timeout
CHANGE_KINDS = (
    LOST,
    REPLACEMENT_STARTED,
    REPLACEMENT_FAILED,
    REPLACEMENT_READY,
    SWAPPED,
    OLD_STOPPED,
)


class EndpointKeeper(Protocol):
    """Where the arena reads a served model's endpoint (its `Contestant` row), as the backend
    moving a model between servers sees it."""

    def move(self, old: Endpoint, new: Endpoint) -> None:
        """New battles go to `new` from now on (and the model is offered to voters again)."""

    def withdraw(self, old: Endpoint) -> None:
        """`old` is gone: offer the model to no new battle until it is moved."""

    def in_flight(self, old: Endpoint, *, since: datetime) -> bool:
        """Whether a battle that may have read `old` (it started generating before `since`,
        when the model was moved) is still streaming."""


class ServingBackend(ABC):
    @abstractmethod
    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        """Start one server per checkpoint; return when all of them answer."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every server this backend started."""

    def maintain(self, keeper: EndpointKeeper) -> list[ServerChange]:
        """One round of keeping the servers up, called from the worker's loop; never blocks
        on a server starting. Default: nothing to do (a local server is restarted by its own
        supervisor thread and keeps its port)."""
        return []


class LocalServingBackend(ServingBackend):
    """Model servers as processes on this machine, on the first free ports from `base_port`
    (the range the firewall keeps agents off), or on ports the OS picks with `base_port=0`."""

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
                port = port + 1 if self.base_port else 0
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
