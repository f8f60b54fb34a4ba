"""The local serving backend on a real `transformers serve` process and a real tiny model."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from arena.serving.client import StreamEnd, TextDelta, stream_chat
from arena.serving.local import ServerStartError, SupervisedModelServer, bind_listener
from tests.conftest import TEST_LOG_DIR

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def ask(endpoint, prompt="What is 2 plus 3?", max_tokens=40):
    text, end = "", None
    async for event in stream_chat(
        endpoint,
        [{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0.0,
        timeout_s=60,
    ):
        if isinstance(event, TextDelta):
            text += event.text
        else:
            end = event
    assert isinstance(end, StreamEnd)
    return text, end


@pytest.mark.asyncio
async def test_the_instruct_model_stops_and_the_base_model_does_not(model_servers):
    instruct_text, instruct_end = await ask(model_servers["instruct"])
    base_text, base_end = await ask(model_servers["base"])
    assert instruct_text and instruct_end.finish_reason == "stop"
    assert base_text and base_end.finish_reason == "length"


def test_a_crashed_server_is_restarted_and_answers_again(tiny_models):
    import asyncio

    listener = bind_listener("127.0.0.1", 0)  # the OS picks the port; the server keeps it
    server = SupervisedModelServer(
        checkpoint=tiny_models / "instruct",
        port=listener.getsockname()[1],
        log_path=TEST_LOG_DIR / "serve-restart.log",
        check_interval_s=0.2,
        listener=listener,
    )
    server.start()
    try:
        first_pid = server.pid
        os.killpg(first_pid, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while not (server.restarts == 1 and server.pid != first_pid and server.healthy()):
            assert time.monotonic() < deadline, "the server was not restarted"
            time.sleep(0.2)
        text, end = asyncio.run(ask(server.endpoint))
        assert text and end.finish_reason == "stop"
    finally:
        pid = server.pid
        server.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped means gone, not orphaned


def test_a_directory_without_a_model_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ServerStartError, match="not a model checkpoint"):
        SupervisedModelServer(checkpoint=tmp_path, port=18191).start()


def test_stopping_ends_a_wait_for_a_restarting_server_at_once(tmp_path):
    # The watcher waits like this while a crashed server restarts; stop() must end the wait,
    # not leave the thread polling a dead port until the ready timeout.
    server = SupervisedModelServer(checkpoint=tmp_path, port=_free_port(), ready_timeout_s=120)
    waiter = threading.Thread(target=server.wait_ready)
    waiter.start()
    time.sleep(0.5)
    stopped = time.monotonic()
    server.stop()
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert time.monotonic() - stopped < 5
