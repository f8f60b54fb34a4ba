"""A Starlette app served by uvicorn in a daemon thread of this process: how the scripted
upstream runs inside a test, and how the test suite's own scripted servers run too."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette

START_TIMEOUT_S = 10.0


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class ThreadedServer:
    def __init__(self, app: Starlette, *, host: str, port: int, what: str) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._what = what

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self._what} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
