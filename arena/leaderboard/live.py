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
    global _screens
    _screens = max(0, _screens - 1)


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
