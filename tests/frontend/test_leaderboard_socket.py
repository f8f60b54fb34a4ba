"""The live leaderboard socket: a screen gets the table, and the refit loop lives only while
some screen is open."""

import asyncio

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from arena.leaderboard import live
from frontend.routing import websocket_urlpatterns

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_the_refit_loop_runs_while_a_screen_is_open_and_ends_with_the_last():
    screens = [
        WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/leaderboard/")
        for _ in range(2)
    ]
    for screen in screens:
        connected, _ = await screen.connect()
        assert connected
        first = await screen.receive_json_from(timeout=5)
        assert first["type"] == "leaderboard" and first["table"]["n_battles"] == 0
    loop_task = live._task
    assert loop_task is not None and not loop_task.done()

    await screens[0].disconnect()
    await asyncio.sleep(live.POLL_SECONDS * 3)
    assert not loop_task.done(), "one screen is still open"

    await screens[1].disconnect()
    await asyncio.wait_for(loop_task, timeout=live.POLL_SECONDS * 5)
