"""The live refit loop: runs inside the site's event loop while any live screen is open.

Every `POLL_SECONDS` it asks whether a counted vote arrived since the last live snapshot; if
so — and at least `MIN_INTERVAL_SECONDS` after its previous refit, so a burst of votes costs
one fit a second — it refits (warm-started, sandwich intervals) and the service pushes the
table to every screen through the channel layer. Several site processes may each run a loop;
the lease in `leaderboard_refresh` lets one of them fit at a time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from channels.db import database_sync_to_async

from arena.leaderboard.services import leaderboard_refresh

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
MIN_INTERVAL_SECONDS = 1.0

_task: asyncio.Task[None] | None = None


def ensure_live_refits() -> None:
    """Start the loop in the running event loop unless it already runs there."""
    global _task
    if _task is None or _task.done():
        _task = asyncio.get_running_loop().create_task(_refit_forever(), name="leaderboard-refits")


async def _refit_forever() -> None:
    holder = f"{socket.gethostname()}:{os.getpid()}"
    last_refit = 0.0
    while True:
        await asyncio.sleep(POLL_SECONDS)
        if time.monotonic() - last_refit < MIN_INTERVAL_SECONDS:
            continue
        try:
            snapshot = await database_sync_to_async(leaderboard_refresh)(holder=holder)
        except Exception:
            log.exception("live leaderboard refit failed; retrying")
            await asyncio.sleep(5)
            continue
        if snapshot is not None:
            last_refit = time.monotonic()
