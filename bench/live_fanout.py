"""The live leaderboard at conference size: `--screens` WebSocket clients on the live board's
socket (/ws/leaderboard/, frontend/consumers.py: LeaderboardConsumer), a vote cast, and how
long until every screen shows it (issue 16, item 2).

For each of `--rounds` votes it prints the vote -> screen latency over all screens (p50, p99,
the slowest), counted from the moment the vote was sent to the moment each screen received
a table whose `n_battles` includes it; and the workers' resident memory per connection (the
growth of their RSS from before the screens connected to after, divided by the screens).

Target (DESIGN.md §6), printed as met or missed: p99 < 1 s. What the latency is made of: the
live refit loop polls every 0.2 s, refits at most once a second (arena/leaderboard/live.py),
then one group_send through Redis reaches every screen.

Client: aiohttp's WebSocket client (aiohttp is installed with the project; `websockets` is
not). Run on a scratch database, like bench/arena_load.py:
    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/live_fanout.py [--own-workers 2 | --url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadkit  # noqa: E402
from arena_load import Results, Voter, battles_ready_to_vote  # noqa: E402

TARGET_P99_S = 1.0
CONNECT_AT_ONCE = 100  # screens connecting at the same moment (a burst, not a thundering herd)


class Screen:
    """One live board: keeps the latest `n_battles` it was shown and when it got each."""

    def __init__(self) -> None:
        self.n_battles = -1
        self.seen_at: dict[int, float] = {}  # n_battles -> when this screen first showed it
        self.first = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def connected(self) -> None:
        """Until the first table arrives, or the socket failed."""
        waiter = asyncio.ensure_future(self.first.wait())
        await asyncio.wait({waiter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()

    async def watch(self, session: aiohttp.ClientSession, url: str) -> None:
        async with session.ws_connect(f"{url}/ws/leaderboard/", origin=url, heartbeat=None) as ws:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    return
                arrived = time.perf_counter()
                frame = json.loads(message.data)
                if frame.get("type") != "leaderboard":
                    continue
                n = int(frame["table"].get("n_battles") or 0)
                self.n_battles = n
                self.seen_at.setdefault(n, arrived)
                self.first.set()


async def run(args: argparse.Namespace, arena: loadkit.Arena, report: dict) -> None:
    workers = arena.worker_pids()
    print(f"worker processes: {len(workers)} ({', '.join(map(str, workers))})")
    connector = aiohttp.TCPConnector(limit=0)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    voters_connector = aiohttp.TCPConnector(limit=0)
    screens = everyone = [Screen() for _ in range(args.screens)]
    try:
        voter = (await _voters(arena.urls, voters_connector))[0]
        ready = await battles_ready_to_vote([voter], args.rounds + 1, Results())
        # One vote before measuring: the first refit of a fresh process imports and warms up.
        await voter.vote(ready[0][1], "a")

        rss_before = sum(loadkit.rss_bytes(p) for p in workers)
        began = time.perf_counter()
        for start in range(0, len(screens), CONNECT_AT_ONCE):
            batch = screens[start : start + CONNECT_AT_ONCE]
            for index, screen in enumerate(batch, start):
                url = arena.urls[index % len(arena.urls)]
                screen.task = asyncio.create_task(screen.watch(session, url))
            await asyncio.wait_for(asyncio.gather(*(s.connected() for s in batch)), 60)
        connected_s = time.perf_counter() - began
        refused = [s for s in screens if not s.first.is_set()]
        if refused:
            print(f"  {len(refused)} screens could not connect (see the workers' logs)")
        report["screens_refused"] = len(refused)
        screens = [s for s in screens if s.first.is_set()]
        await asyncio.sleep(2.0)  # let the warm-up vote's refit reach everyone and settle
        rss_after = sum(loadkit.rss_bytes(p) for p in workers)
        per_connection = (rss_after - rss_before) / len(screens)
        print(
            f"{len(screens)} screens connected in {connected_s:.1f} s; workers' RSS "
            f"{rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB: "
            f"{per_connection / 1024:.0f} KiB per connection"
        )
        report["screens"] = len(screens)
        report["rss_per_connection_kib"] = per_connection / 1024

        latencies: list[float] = []
        missed = 0
        for round_number, (_, battle) in enumerate(ready[1:], 1):
            shown_before = max(s.n_battles for s in screens)
            sent = time.perf_counter()
            status = await voter.vote(battle, "b")
            if status != 200:
                raise SystemExit(f"the vote was refused (HTTP {status})")
            deadline = sent + args.wait_seconds
            while time.perf_counter() < deadline:
                if all(s.n_battles > shown_before for s in screens):
                    break
                await asyncio.sleep(0.01)
            this_round = []
            for screen in screens:
                shown = [t for n, t in screen.seen_at.items() if n > shown_before]
                if shown:
                    this_round.append(min(shown) - sent)
                else:
                    missed += 1
            latencies.extend(this_round)
            print(
                f"  vote {round_number}: on {len(this_round)} of {len(screens)} screens;"
                f" p50 {loadkit.percentile(this_round, 0.5) * 1000:.0f} ms,"
                f" p99 {loadkit.percentile(this_round, 0.99) * 1000:.0f} ms,"
                f" slowest {max(this_round, default=float('nan')) * 1000:.0f} ms"
            )
            await asyncio.sleep(args.pause_seconds)
        closed = [s.task for s in screens if s.task is not None and s.task.done()]
        if closed:
            reasons = {repr(t.exception()) if not t.cancelled() else "cancelled" for t in closed}
            print(f"  {len(closed)} screens lost their socket: {', '.join(sorted(reasons))[:300]}")
        report["sockets_lost"] = len(closed)
        p50 = loadkit.percentile(latencies, 0.5)
        p99 = loadkit.percentile(latencies, 0.99)
        report.update({"p50_s": p50, "p99_s": p99, "missed": missed, "rounds": args.rounds})
        print(
            f"\nvote -> every screen over {args.rounds} votes x {len(screens)} screens:"
            f" p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, screens never updated: {missed}"
        )
        print(
            f"  target p99 < {TARGET_P99_S:g} s: {'met' if p99 < TARGET_P99_S and not missed else 'MISSED'}"
        )
        print(f"  memory per connection: {per_connection / 1024:.0f} KiB (workers' RSS growth)")
    finally:
        for screen in everyone:
            if screen.task is not None:
                screen.task.cancel()
        await asyncio.gather(*(s.task for s in everyone if s.task), return_exceptions=True)
        await session.close()
        await voters_connector.close()


async def _voters(urls: list[str], connector: aiohttp.BaseConnector) -> list[Voter]:
    voter = Voter(urls[0], connector)
    await voter.open()
    return [voter]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", help="a running arena (the proxy's URL); default: bring the kit up"
    )
    parser.add_argument("--own-workers", type=int, default=0, help="start N daphne workers here")
    parser.add_argument("--workers", type=int, default=2, help="workers the kit starts")
    parser.add_argument("--screens", type=int, default=1000, help="live board connections")
    parser.add_argument("--rounds", type=int, default=5, help="votes, each timed to every screen")
    parser.add_argument("--pause-seconds", type=float, default=1.5, help="between two votes")
    parser.add_argument("--wait-seconds", type=float, default=10.0, help="give up on a vote after")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    loadkit.django_setup()
    report: dict = {}
    with loadkit.scripted_models() as (models_url, _):
        loadkit.contestants_for_load(models_url)
        with loadkit.arena_running(
            url=args.url, own_workers=args.own_workers, kit_workers=args.workers
        ) as arena:
            print(f"arena: {arena.how}")
            report["arena"] = arena.how
            asyncio.run(run(args, arena, report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
