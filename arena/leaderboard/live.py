"""The live refit loop: runs inside the site's event loop while any live screen is open.

Every `POLL_SECONDS` it asks whether a counted vote arrived since the last live snapshot; if
so it refits (warm-started, sandwich intervals) and the service pushes the table to every
screen through the channel layer. `leaderboard_refresh` refits at most once every
`REFIT_MIN_INTERVAL_SECONDS` whoever asks, and its lease lets one caller fit at a time, so
several site processes may each run a loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async

from arena.leaderboard.services import REFIT_MIN_INTERVAL_SECONDS, leaderboard_refresh

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2

_task: asyncio.Task[None] | None = None
_screens = 0  # live screens open in this process: the loop runs while there is one

# thread_sensitive=False: the refit runs in a worker thread of its own rather than the one
# thread that all sync views and consumers of this process share, so a fit never stalls
# them. That is safe with the database: Django's connections are per thread, and
# database_sync_to_async closes the thread's stale connections before and after the call.
_refresh = database_sync_to_async(leaderboard_refresh, thread_sensitive=False)


def screen_opened() -> None:
    """A live screen connected: start the loop in the running event loop unless it runs."""
    global _screens
    _screens += 1
    ensure_live_refits()


def screen_closed() -> None:
    """A live screen went away; with the last one the loop ends at its next poll."""
    global _screens, _shown
    _screens = max(0, _screens - 1)
    if _screens == 0:
        _shown = None  # nobody receives the updates that kept it current any more


# The table this process's screens show, kept while one is open: a conference's screens
# connect in bursts, and one database read each ran PostgreSQL out of connections at a few
# hundred (bench/live_fanout.py). Every refit reaches every open screen (`table_shown`), so
# the kept table is the current one; the first screen reads it, the others wait for that read.
_shown: tuple[asyncio.AbstractEventLoop, dict[str, Any]] | None = None
_reading: asyncio.Task[dict[str, Any]] | None = None


async def table_for_new_screen(read: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """The live table for a screen that just connected (after `screen_opened`): the kept one,
    else one `read()` shared by every screen connecting meanwhile."""
    global _shown, _reading
    loop = asyncio.get_running_loop()
    if _shown is not None and _shown[0] is loop:
        return _shown[1]
    if _reading is None or _reading.done() or _reading.get_loop() is not loop:
        _reading = loop.create_task(_read_and_keep(read))
    return await asyncio.shield(_reading)


async def _read_and_keep(read: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    global _shown
    table = await read()
    if _screens and _shown is None:  # a refit that arrived meanwhile is newer: keep that
        _shown = (asyncio.get_running_loop(), table)
    return table


def table_shown(table: dict[str, Any]) -> None:
    """A refit's table reached this process's screens: new screens get it too."""
    global _shown
    if _screens:
        _shown = (asyncio.get_running_loop(), table)


def ensure_live_refits() -> None:
    """Start the loop in the running event loop unless it already runs there."""
    global _task
    if _task is None or _task.done():
        _task = asyncio.get_running_loop().create_task(_refit_forever(), name="leaderboard-refits")


async def _refit_forever() -> None:
    holder = f"live:{socket.gethostname()}:{os.getpid()}"
    last_refit = 0.0
    while True:
        await asyncio.sleep(POLL_SECONDS)
        if _screens == 0:
            return  # nobody watches: page views and the next screen refit on demand
        if time.monotonic() - last_refit < REFIT_MIN_INTERVAL_SECONDS:
            continue  # the service would refuse anyway: spare it the query
        try:
            snapshot = await _refresh(holder=holder)
        except Exception:
            log.exception("live leaderboard refit failed; retrying")
            await asyncio.sleep(5)
            continue
        if snapshot is not None:
            last_refit = time.monotonic()
