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
        connected, _ = await screen.connect(timeout=20)
        assert connected
        first = await screen.receive_json_from(timeout=20)
        assert first["type"] == "leaderboard" and first["table"]["n_battles"] == 0
    loop_task = live._task
    assert loop_task is not None and not loop_task.done()

    await screens[0].disconnect()
    await asyncio.sleep(live.POLL_SECONDS * 3)
    assert not loop_task.done(), "one screen is still open"

    await screens[1].disconnect()
    await asyncio.wait_for(loop_task, timeout=live.POLL_SECONDS * 5)


async def test_screens_connecting_in_a_burst_share_one_database_read(monkeypatch):
    # A conference's screens connect together: one read each ran PostgreSQL out of
    # connections at a few hundred (bench/live_fanout.py).
    reads = []

    async def counting_read():
        reads.append(1)
        await asyncio.sleep(0.2)  # the burst arrives while the first read is under way
        return {"n_battles": 3}

    monkeypatch.setattr("frontend.consumers._live_table_from_database", counting_read)
    screens = [
        WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/leaderboard/")
        for _ in range(20)
    ]
    await asyncio.gather(*(screen.connect(timeout=20) for screen in screens))
    firsts = await asyncio.gather(*(screen.receive_json_from(timeout=20) for screen in screens))
    assert all(first["table"] == {"n_battles": 3} for first in firsts)
    assert len(reads) == 1

    # A refit reaches the open screens, and the next screen starts from it, read from nowhere.
    from channels.layers import get_channel_layer

    from arena.leaderboard.services import LIVE_GROUP

    await get_channel_layer().group_send(
        LIVE_GROUP, {"type": "leaderboard.update", "table": {"n_battles": 4}}
    )
    assert (await screens[0].receive_json_from(timeout=20))["table"] == {"n_battles": 4}
    late = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/leaderboard/")
    await late.connect(timeout=20)
    assert (await late.receive_json_from(timeout=20))["table"] == {"n_battles": 4}
    assert len(reads) == 1

    for screen in [*screens, late]:
        await screen.disconnect()
    # With the last screen gone nothing keeps the table current: the next one reads again.
    again = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/leaderboard/")
    await again.connect(timeout=20)
    await again.receive_json_from(timeout=20)
    assert len(reads) == 2
    await again.disconnect()
