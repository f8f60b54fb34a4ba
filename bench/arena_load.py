"""Load on the vote path: concurrent voters against the arena's real HTTP and WebSocket
endpoints, through nginx and several workers, on PostgreSQL and Redis (issue 16, item 2).

Four phases, one run:

1. **insert baseline**: pgbench, 8 clients, one single-row INSERT a transaction, into a table
   of its own in the same database: what PostgreSQL itself sustains here, right now;
2. **whole battles**: `--voters` voters each start a battle (POST /api/battles), read both
   answers from the battle socket until `battle_done`, and vote; battles/s, p50/p99 of each
   step, and the workers' CPU per battle (from /proc);
3. **votes at full speed**: battles are started through the API and then marked complete in
   the database (the answers were measured in phase 2), and `--vote-clients` clients cast
   their votes as fast as the arena answers: votes/s and the ratio to the insert baseline;
4. **votes at a fixed rate** (`--rate`/s for `--rate-seconds`): each vote is sent at its
   scheduled time whatever the others do, and its latency counts from that time, so a
   stalled server shows as latency rather than as fewer requests.

Targets (DESIGN.md §6), printed as met or missed, never asserted: >= 1,000 votes/s; vote p99
< 50 ms at 300 votes/s. Scripted contestants answer at once, so model speed does not count.

Run (on a scratch database; see bench/loadkit.py and bench/README.md):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena_load REDIS_URL=redis://127.0.0.1:6379/5 \\
        .venv/bin/python bench/arena_load.py [--own-workers 2 | --url http://127.0.0.1:8080]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadkit  # noqa: E402

PROMPTS = [
    "How should I speed up a slow web service?",
    "Give me three tips for writing clear code.",
    "What is a good way to learn a new language?",
    "Explain caching to a beginner.",
]
TARGET_VOTES_PER_S = 1000.0
TARGET_VOTE_P99_MS = 50.0


@dataclass
class Results:
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, step: str, ms: float) -> None:
        self.latencies_ms.setdefault(step, []).append(ms)

    def error(self, what: str) -> None:
        self.errors[what] += 1

    def step_line(self, step: str) -> str:
        values = self.latencies_ms.get(step, [])
        return (
            f"  {step:<14} n={len(values):>6}  p50 {loadkit.percentile(values, 0.5):7.1f} ms"
            f"  p99 {loadkit.percentile(values, 0.99):7.1f} ms"
        )


# -- a voter ---------------------------------------------------------------------------------


class Voter:
    """One browser session: its own cookies, on one entry URL (the proxy, or one worker)."""

    def __init__(self, base_url: str, connector: aiohttp.BaseConnector) -> None:
        self.base_url = base_url
        # unsafe: keep cookies set by an IP address host (127.0.0.1), as a browser does.
        self.session = aiohttp.ClientSession(
            base_url=base_url,
            connector=connector,
            connector_owner=False,
            cookie_jar=aiohttp.CookieJar(unsafe=True),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        self.headers: dict[str, str] = {}

    async def open(self) -> None:
        async with self.session.get("/") as reply:
            reply.raise_for_status()
            await reply.read()
        csrf = next((c.value for c in self.session.cookie_jar if c.key == "csrftoken"), "")
        self.headers = {"X-CSRFToken": csrf, "Referer": self.base_url + "/"}

    async def close(self) -> None:
        await self.session.close()

    async def start_battle(self, prompt: str) -> str | None:
        async with self.session.post(
            "/api/battles", json={"prompt": prompt}, headers=self.headers
        ) as reply:
            body = await reply.json(content_type=None)
            return str(body["battle"]) if reply.status == 201 else None

    async def read_answers(self, battle_id: str) -> bool:
        """Both answers from the battle socket; True if the battle can be voted on."""
        async with self.session.ws_connect(
            f"/ws/battles/{battle_id}/", origin=self.base_url, autoping=True
        ) as ws:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    return False
                frame = json.loads(message.data)
                if frame["type"] == "battle_done":
                    return bool(frame.get("votable"))
                if frame["type"] == "error":
                    return False
        return False

    async def vote(self, battle_id: str, choice: str) -> int:
        async with self.session.post(
            f"/api/battles/{battle_id}/vote", json={"choice": choice}, headers=self.headers
        ) as reply:
            await reply.read()
            return reply.status


async def voters_open(urls: list[str], count: int, connector: aiohttp.BaseConnector) -> list[Voter]:
    voters = [Voter(urls[i % len(urls)], connector) for i in range(count)]
    await asyncio.gather(*(v.open() for v in voters))
    return voters


# -- phases ----------------------------------------------------------------------------------


def pgbench_inserts_per_s(*, clients: int, seconds: int) -> tuple[float, str]:
    """Single-row INSERTs a second PostgreSQL commits with `clients` clients (pgbench)."""
    from django.db import connection

    pgbench = shutil.which("pgbench")
    if pgbench is None:
        return float("nan"), "pgbench is not installed (apt: postgresql-client)"
    settings = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_single_row_insert")
        cursor.execute(
            "CREATE TABLE bench_single_row_insert (id bigserial PRIMARY KEY, battle text NOT NULL,"
            " choice text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        )
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(
                "INSERT INTO bench_single_row_insert (battle, choice) VALUES (md5(random()::text), 'a');\n"
            )
            script.flush()
            env = {**os.environ, "PGPASSWORD": settings.get("PASSWORD") or ""}
            run = subprocess.run(
                [
                    pgbench, "-n", "-c", str(clients), "-j", str(min(clients, 2)),
                    "-T", str(seconds), "-f", script.name,
                    "-h", settings.get("HOST") or "127.0.0.1",
                    "-p", str(settings.get("PORT") or 5432),
                    "-U", settings.get("USER") or "postgres",
                    settings["NAME"],
                ],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_single_row_insert")
    found = re.search(r"tps = ([\d.]+)", run.stdout)
    if run.returncode != 0 or found is None:
        return float("nan"), f"pgbench failed: {run.stderr.strip()[-300:]}"
    return float(found.group(1)), f"pgbench, {clients} clients, {seconds} s"


async def whole_battles(voters: list[Voter], battles: int, results: Results) -> int:
    """Each voter runs battle after battle until `battles` have been started; returns votes."""
    claimed = itertools.count()
    votes = 0

    async def loop(voter: Voter, index: int) -> None:
        nonlocal votes
        choices = itertools.cycle(["a", "b", "tie", "a", "b"])
        while next(claimed) < battles:
            prompt = PROMPTS[index % len(PROMPTS)]
            try:
                began = time.perf_counter()
                battle = await voter.start_battle(prompt)
                started = time.perf_counter()
                results.add("start battle", (started - began) * 1000)
                if battle is None:
                    results.error("start refused")
                    continue
                votable = await voter.read_answers(battle)
                read = time.perf_counter()
                results.add("both answers", (read - started) * 1000)
                if not votable:
                    results.error("battle not votable")
                    continue
                status = await voter.vote(battle, next(choices))
                results.add("vote", (time.perf_counter() - read) * 1000)
                results.add("whole battle", (time.perf_counter() - began) * 1000)
                if status == 200:
                    votes += 1
                else:
                    results.error(f"vote HTTP {status}")
            except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as error:
                results.error(type(error).__name__)

    await asyncio.gather(*(loop(v, i) for i, v in enumerate(voters)))
    return votes


async def battles_ready_to_vote(
    voters: list[Voter], count: int, results: Results
) -> list[tuple[Voter, str]]:
    """`count` battles started through the API, then marked complete in the database (their
    answers would be the same scripted ones phase 2 streamed)."""
    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from arena.battles.models import Battle

    ready: list[tuple[Voter, str]] = []
    claimed = itertools.count()

    async def loop(voter: Voter, index: int) -> None:
        while next(claimed) < count:
            try:
                battle = await voter.start_battle(PROMPTS[index % len(PROMPTS)])
            except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as error:
                results.error(f"prepare: {type(error).__name__}")
                continue
            if battle is None:
                results.error("prepare: start refused")
            else:
                ready.append((voter, battle))

    await asyncio.gather(*(loop(v, i) for i, v in enumerate(voters)))

    def complete(ids: list[str]) -> None:
        Battle.objects.filter(pk__in=ids).update(
            state=Battle.State.COMPLETE, completed_at=timezone.now()
        )

    await sync_to_async(complete)([battle for _, battle in ready])
    return ready


async def votes_flat_out(ready: list[tuple[Voter, str]], clients: int, results: Results) -> int:
    queue = iter(ready)
    accepted = 0

    async def client() -> None:
        nonlocal accepted
        for voter, battle in queue:
            began = time.perf_counter()
            try:
                status = await voter.vote(battle, "a")
            except (aiohttp.ClientError, TimeoutError) as error:
                results.error(f"vote: {type(error).__name__}")
                continue
            results.add("vote (flat out)", (time.perf_counter() - began) * 1000)
            if status == 200:
                accepted += 1
            else:
                results.error(f"vote HTTP {status}")

    await asyncio.gather(*(client() for _ in range(clients)))
    return accepted


async def votes_at_rate(ready: list[tuple[Voter, str]], rate: float, results: Results) -> int:
    """Open loop: vote i leaves at t0 + i/rate; its latency counts from then."""
    accepted = 0
    t0 = time.perf_counter() + 0.05

    async def one(index: int, voter: Voter, battle: str) -> None:
        nonlocal accepted
        due = t0 + index / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        try:
            status = await voter.vote(battle, "b")
        except (aiohttp.ClientError, TimeoutError) as error:
            results.error(f"vote at rate: {type(error).__name__}")
            return
        results.add("vote (at rate)", (time.perf_counter() - due) * 1000)
        if status == 200:
            accepted += 1
        else:
            results.error(f"vote at rate HTTP {status}")

    await asyncio.gather(*(one(i, v, b) for i, (v, b) in enumerate(ready)))
    return accepted


# -- the run ---------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


async def run_phases(args: argparse.Namespace, arena: loadkit.Arena, report: dict) -> None:
    workers = arena.worker_pids()
    groups = {
        "workers": arena.worker_pids,
        "postgres": lambda: loadkit.pids_named("postgres"),
        "redis": lambda: loadkit.pids_named("redis-server"),
        "nginx": lambda: loadkit.pids_named("nginx"),
        "this client": lambda: [os.getpid()],
    }
    print(f"worker processes: {len(workers)} ({', '.join(map(str, workers))})")
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    voters = await voters_open(arena.urls, max(args.voters, args.vote_clients), connector)
    try:
        # Warm-up: imports, connections and caches of every worker.
        await whole_battles(voters[: args.voters], args.voters * 2, Results())

        results = Results()
        meter = loadkit.CpuMeter(groups)
        with loadkit.profiled(workers, args.profile, "battles"):
            meter.start()
            began = time.perf_counter()
            votes = await whole_battles(voters[: args.voters], args.battles, results)
            seconds = time.perf_counter() - began
            meter.stop()
        # Per battle voted on: a battle refused or broken off costs less and would flatter it.
        cpu_ms = meter.spent["workers"] * 1000 / max(1, votes)
        print(
            f"\nwhole battles: {args.battles} battles by {args.voters} voters in {seconds:.1f} s:"
            f" {args.battles / seconds:.1f} battles/s, {votes / seconds:.1f} votes/s"
        )
        for step in ("start battle", "both answers", "vote", "whole battle"):
            print(results.step_line(step))
        print(f"  worker CPU per battle voted on: {cpu_ms:.1f} ms")
        print("  " + meter.line(seconds))
        report["whole_battles"] = {
            "battles": args.battles,
            "voters": args.voters,
            "seconds": seconds,
            "battles_per_s": args.battles / seconds,
            "votes": votes,
            "worker_cpu_ms_per_battle": cpu_ms,
            "cpu_share": {g: s / seconds for g, s in meter.spent.items()},
            "p50_ms": {k: loadkit.percentile(v, 0.5) for k, v in results.latencies_ms.items()},
            "p99_ms": {k: loadkit.percentile(v, 0.99) for k, v in results.latencies_ms.items()},
            "errors": dict(results.errors),
        }

        results_votes = Results()
        ready = await battles_ready_to_vote(voters, args.votes, results_votes)
        meter = loadkit.CpuMeter(groups)
        with loadkit.profiled(workers, args.profile, "votes"):
            meter.start()
            began = time.perf_counter()
            accepted = await votes_flat_out(ready, args.vote_clients, results_votes)
            seconds = time.perf_counter() - began
            meter.stop()
        votes_per_s = accepted / seconds
        cpu_ms = meter.spent["workers"] * 1000 / max(1, accepted)
        print(
            f"\nvotes flat out: {accepted} of {len(ready)} votes by {args.vote_clients} clients in"
            f" {seconds:.1f} s: {votes_per_s:.0f} votes/s"
        )
        print(results_votes.step_line("vote (flat out)"))
        print(f"  worker CPU per vote: {cpu_ms:.2f} ms")
        print("  " + meter.line(seconds))
        report["votes_flat_out"] = {
            "votes": accepted,
            "clients": args.vote_clients,
            "seconds": seconds,
            "votes_per_s": votes_per_s,
            "worker_cpu_ms_per_vote": cpu_ms,
            "cpu_share": {g: s / seconds for g, s in meter.spent.items()},
            "p50_ms": loadkit.percentile(
                results_votes.latencies_ms.get("vote (flat out)", []), 0.5
            ),
            "p99_ms": loadkit.percentile(
                results_votes.latencies_ms.get("vote (flat out)", []), 0.99
            ),
            "errors": dict(results_votes.errors),
        }

        results_rate = Results()
        ready = await battles_ready_to_vote(
            voters, round(args.rate * args.rate_seconds), results_rate
        )
        meter = loadkit.CpuMeter(groups)
        meter.start()
        began = time.perf_counter()
        accepted = await votes_at_rate(ready, args.rate, results_rate)
        seconds = time.perf_counter() - began
        meter.stop()
        at_rate = results_rate.latencies_ms.get("vote (at rate)", [])
        p99 = loadkit.percentile(at_rate, 0.99)
        print(
            f"\nvotes at {args.rate:g}/s for {args.rate_seconds:g} s: {accepted} of {len(ready)}"
            f" accepted"
        )
        print(results_rate.step_line("vote (at rate)"))
        print("  " + meter.line(seconds))
        report["votes_at_rate"] = {
            "rate": args.rate,
            "votes": accepted,
            "p50_ms": loadkit.percentile(at_rate, 0.5),
            "p99_ms": p99,
            "cpu_share": {g: s / seconds for g, s in meter.spent.items()},
            "errors": dict(results_rate.errors),
        }
        errors = results.errors + results_votes.errors + results_rate.errors
        print(f"\nerrors: {dict(errors) or 'none'}")
    finally:
        await asyncio.gather(*(v.close() for v in voters))
        await connector.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", help="a running arena (the proxy's URL); default: bring the kit up"
    )
    parser.add_argument(
        "--own-workers", type=int, default=0, help="start N daphne workers here instead of the kit"
    )
    parser.add_argument(
        "--code-root",
        type=Path,
        default=loadkit.ROOT,
        help="with --own-workers: the checkout the workers run (to measure a change against it)",
    )
    parser.add_argument("--workers", type=int, default=2, help="workers the kit starts (default 2)")
    parser.add_argument("--voters", type=int, default=16, help="concurrent voters in whole battles")
    parser.add_argument("--battles", type=int, default=400, help="whole battles to run")
    parser.add_argument("--votes", type=int, default=3000, help="votes cast flat out")
    parser.add_argument(
        "--vote-clients", type=int, default=32, help="concurrent clients casting them"
    )
    parser.add_argument(
        "--rate", type=float, default=300.0, help="votes a second in the fixed-rate phase"
    )
    parser.add_argument(
        "--rate-seconds", type=float, default=10.0, help="how long the fixed-rate phase lasts"
    )
    parser.add_argument("--pg-clients", type=int, default=8)
    parser.add_argument("--pg-seconds", type=int, default=5)
    parser.add_argument(
        "--profile", type=Path, help="py-spy the workers into this folder (collapsed stacks)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    loadkit.django_setup()
    report: dict = {}
    with loadkit.scripted_models() as (models_url, models_process):
        loadkit.contestants_for_load(models_url)
        inserts_per_s, how = pgbench_inserts_per_s(clients=args.pg_clients, seconds=args.pg_seconds)
        print(f"PostgreSQL single-row inserts: {inserts_per_s:,.0f}/s ({how})")
        report["pg_inserts_per_s"] = inserts_per_s
        with loadkit.arena_running(
            url=args.url,
            own_workers=args.own_workers,
            kit_workers=args.workers,
            code_root=args.code_root.resolve(),
        ) as arena:
            print(f"arena: {arena.how}")
            report["arena"] = arena.how
            asyncio.run(run_phases(args, arena, report))

    votes_per_s = report["votes_flat_out"]["votes_per_s"]
    p99 = report["votes_at_rate"]["p99_ms"]
    ratio = votes_per_s / inserts_per_s if inserts_per_s else float("nan")
    report["votes_to_inserts_ratio"] = ratio
    print("\nsummary")
    print(
        f"  votes/s {votes_per_s:,.0f} = {ratio * 100:.1f}% of PostgreSQL's {inserts_per_s:,.0f} inserts/s"
    )
    print(
        f"  target >= {TARGET_VOTES_PER_S:,.0f} votes/s: {met(votes_per_s >= TARGET_VOTES_PER_S)}"
    )
    print(
        f"  target vote p99 < {TARGET_VOTE_P99_MS:g} ms at {args.rate:g} votes/s: "
        f"{p99:.1f} ms, {met(p99 < TARGET_VOTE_P99_MS)}"
    )
    print(
        f"  whole battles: {report['whole_battles']['battles_per_s']:.1f}/s, "
        f"{report['whole_battles']['worker_cpu_ms_per_battle']:.1f} ms worker CPU each"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
