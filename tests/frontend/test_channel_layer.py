import asyncio

import pytest
from channels.layers import get_channel_layer

from agents.firewall import platform_ports


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_socket_idle_longer_than_the_redis_read_timeout_still_gets_its_message():
    # channels_redis waits 5 s at a time for a channel's next message; redis-py 8 gives every
    # read 5 s by default. A live board idle between refits lost that race and was closed.
    layer = get_channel_layer()
    channel = await layer.new_channel()

    async def send_later() -> None:
        await asyncio.sleep(7)
        await layer.send(channel, {"type": "leaderboard.update", "table": {}})

    sender = asyncio.create_task(send_later())
    message = await asyncio.wait_for(layer.receive(channel), 20)
    await sender
    assert message["type"] == "leaderboard.update"


def test_the_firewall_still_finds_the_redis_port_in_the_channel_layer_settings(settings):
    settings.CHANNEL_LAYERS = {
        "default": {"CONFIG": {"hosts": [{"address": "redis://127.0.0.1:6390/2"}]}}
    }
    settings.AGENTS_FIREWALL_PORTS = []
    assert any(low <= 6390 <= high for low, high in platform_ports())
