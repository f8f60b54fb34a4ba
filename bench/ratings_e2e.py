"""Ratings at Chatbot Arena's size, end to end: getting a million battles into the fit.

Builds N battles (default 1,000,000) among M models (default 100) once, seeded, and:

1. writes them as a battle export (JSONL, our export's fields without the conversations,
   as Chatbot Arena's public clean-battle files are) and runs, each as its own process
   measured with /usr/bin/time (wall seconds, peak resident memory):
   - `manage.py ratings --votes FILE --json --ci sandwich`: the streaming columnar reader;
   - the same command with the record-by-record reader it replaced (the reference, same
     file, same run);
   - `manage.py ratings --votes FILE --json` with the default 100-round bootstrap;
2. copies the same battles as counted votes into a scratch PostgreSQL database (COPY:
   battles, both answers, votes), then times in this process:
   - `counted_battles()` (the columnar read) against `counted_battles_row_by_row()` (the
     reference), checking that both give the fit the same arrays;
   - a full live refit (`leaderboard_refresh`: read, styled and raw fits with sandwich
     intervals, analyses, snapshot saved and pushed);
   - one more vote, then the next live refit: how long that vote takes to reach screens.

Prints each figure, the reference's, the ratios, and the targets of issue 16 item 8:
`ratings --votes` ≤ 10 s and < 1 GB; a refit from a million votes in PostgreSQL ≤ 5 s; a vote
on live screens within 1 s. Exits with status 1 when one is missed. Not part of the tests.

Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/arena .venv/bin/python
bench/ratings_e2e.py [--battles N] [--models M] [--seed S] [--keep]` — the scratch database
is `<that database>_ratings_bench`, created and dropped by the bench (kept with `--keep`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# As `arena` sets it for the site and the commands (see arena/__init__.py): before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena.rating.synthetic import synthetic_battles  # noqa: E402

WINNER_OF = {1.0: "model_a", 0.0: "model_b", 0.5: "tie"}
CHOICE_OF = {"model_a": "a", "model_b": "b", "tie": "tie", "tie (bothbad)": "bothbad"}
HEADERS = [f"h{i}" for i in range(1, 7)]

# The reference: the same command with the reader it replaced (every line a BattleRecord).
REFERENCE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
import django
django.setup()
from django.core.management import call_command
from arena.battles.export import read_battle_export
from arena.leaderboard import inputs
from arena.leaderboard.management.commands import ratings

def record_by_record(path, *, style):
    return inputs.battles_from_records(read_battle_export(path, require_style=style), style=style)

ratings.battles_from_file = record_by_record
call_command("ratings", *sys.argv[1:])
"""


class Data:
    """The battles, as columns: sides, winners, and each side's eight style counts."""

    def __init__(self, *, n_battles: int, n_models: int, seed: int) -> None:
        battles, _ = synthetic_battles(
            n_battles=n_battles, n_models=n_models, seed=seed, tie_share=0.1
        )
        rng = np.random.default_rng(seed + 1)
        self.models = battles.models
        self.a, self.b = battles.a, battles.b
        self.winner = [WINNER_OF[o] for o in battles.outcome.tolist()]
        for i in np.flatnonzero(rng.random(n_battles) < 0.03).tolist():
            if self.winner[i] == "tie":
                self.winner[i] = "tie (bothbad)"
        self.tokens = rng.poisson(200, (n_battles, 2))
        self.headers = rng.poisson(0.3, (n_battles, 2, 6))
        self.lists = rng.poisson(1.5, (n_battles, 2, 2))
        self.bold = rng.poisson(0.8, (n_battles, 2, 2))
        self.start = datetime(2026, 11, 1, tzinfo=UTC)

    def __len__(self) -> int:
        return len(self.winner)

    def counts(self, i: int, side: int) -> tuple[str, str, str]:
        headers = dict(zip(HEADERS, self.headers[i, side].tolist(), strict=True))
        ordered, unordered = self.lists[i, side].tolist()
        stars, underscores = self.bold[i, side].tolist()
        return (
            json.dumps(headers),
            json.dumps({"ordered": ordered, "unordered": unordered}),
            json.dumps({"**": stars, "__": underscores}),
        )


def write_export(data: Data, path: Path) -> None:
    with path.open("w") as out:
        for i in range(len(data)):
            headers_a, lists_a, bold_a = data.counts(i, 0)
            headers_b, lists_b, bold_b = data.counts(i, 1)
            out.write(
                f'{{"battle_id": "b{i:08d}", "conv_metadata": {{"bold_count_a": {bold_a}, '
                f'"bold_count_b": {bold_b}, "header_count_a": {headers_a}, '
                f'"header_count_b": {headers_b}, "leaked_side": "", "list_count_a": {lists_a}, '
                f'"list_count_b": {lists_b}, "sum_assistant_a_tokens": {data.tokens[i, 0]}, '
                f'"sum_assistant_b_tokens": {data.tokens[i, 1]}, "sum_user_tokens": 12, '
                f'"vote": "{CHOICE_OF[data.winner[i]]}"}}, "judge": "j{i % 5000}", '
                f'"language": "", "model_a": "{data.models[data.a[i]]}", '
                f'"model_b": "{data.models[data.b[i]]}", "phase": "", "targeted_round": null, '
                f'"tstamp": {1793000000 + i}, "winner": "{data.winner[i]}"}}\n'
            )


def timed_process(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident MB and stdout of one process, by /usr/bin/time (which
    also prints the CPU seconds: on a shared machine they say more than the wall time)."""
    with tempfile.NamedTemporaryFile("r") as report:
        done = subprocess.run(
            ["/usr/bin/time", "-o", report.name, "-f", "%U %S %e %M", *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
        user, system, seconds, kib = report.read().split()[-4:]
    print(f"  ({float(user) + float(system):.1f} CPU s)", end=" ")
    return float(seconds), int(kib) / 1024, done.stdout


def scratch_database(url: str, *, create: bool) -> str:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/") + "_ratings_bench"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            connection.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path="/" + name))


def copy_rows(cursor, model, given: list[str], rows) -> None:
    """COPY `rows` (tab-separated text for the `given` columns) into `model`'s table; every
    other column gets its field's default, the same on each row."""
    from django.db import connection

    fields = [f for f in model._meta.concrete_fields if f.column not in given]
    fields = [
        f for f in fields if not (f.primary_key and f.column == "id" and f.get_default() is None)
    ]
    constant = []
    for field in fields:
        value = field.get_default()
        if value is None:
            constant.append("\\N")
        elif isinstance(value, dict | list):
            constant.append(json.dumps(value))
        elif isinstance(value, bool):
            constant.append("t" if value else "f")
        else:
            constant.append(str(field.get_db_prep_value(value, connection)))
    tail = "".join("\t" + value for value in constant)
    columns = ", ".join(f'"{c}"' for c in [*given, *(f.column for f in fields)])
    with cursor.copy(f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN') as copy:
        block = []
        for row in rows:
            block.append(row + tail + "\n")
            if len(block) == 50_000:
                copy.write("".join(block))
                block = []
        copy.write("".join(block))


def fill_database(data: Data) -> None:
    from django.db import connection

    from arena.battles.models import Answer, Battle, Vote
    from arena.serving.client import Endpoint
    from arena.serving.services import contestant_register

    ids = [
        contestant_register(
            display_name=name, endpoint=Endpoint(base_url="http://127.0.0.1:9/v1", model=name)
        ).pk
        for name in data.models
    ]
    n = len(data)
    stamp = [(data.start + timedelta(milliseconds=i)).isoformat() for i in range(n)]
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        copy_rows(
            cursor,
            Battle,
            ["id", "prompt", "state", "voter_key", "ip_hash", "created_at", "completed_at"],
            (f"b{i:08d}\tp\tcomplete\tv{i % 5000}\tip\t{stamp[i]}\t{stamp[i]}" for i in range(n)),
        )
        sides = [(0, "a", data.a), (1, "b", data.b)]
        copy_rows(
            cursor,
            Answer,
            [
                "battle_id",
                "side",
                "contestant_id",
                "tokens",
                "header_counts",
                "list_counts",
                "bold_counts",
            ],
            (
                f"b{i:08d}\t{side}\t{ids[who[i]]}\t{data.tokens[i, s]}\t"
                + "\t".join(data.counts(i, s))
                for i in range(n)
                for s, side, who in sides
            ),
        )
        copy_rows(
            cursor,
            Vote,
            [
                "battle_id",
                "choice",
                "counted",
                "voter_key",
                "ip_hash",
                "seconds_after_answers",
                "created_at",
            ],
            (
                f"b{i:08d}\t{CHOICE_OF[data.winner[i]]}\tt\tv{i % 5000}\tip\t5\t{stamp[i]}"
                for i in range(n)
            ),
        )
        cursor.execute("ANALYZE")


def database_figures(data: Data) -> dict[str, float]:
    from arena.battles.selectors import exclusions_summary
    from arena.leaderboard import services
    from arena.leaderboard.inputs import counted_battles, counted_battles_row_by_row
    from arena.leaderboard.live_inputs import live_battles, live_inputs_forget
    from arena.leaderboard.services import REFIT_MIN_INTERVAL_SECONDS, leaderboard_refresh
    from arena.rating import fit_ratings

    started = time.perf_counter()
    new, _ = counted_battles()
    new_s = time.perf_counter() - started
    started = time.perf_counter()
    old, _ = counted_battles_row_by_row()
    old_s = time.perf_counter() - started
    assert new is not None and old is not None and new.models == old.models
    for name in ("a", "b", "outcome", "style"):
        assert np.array_equal(getattr(new, name), getattr(old, name)), name
    del old, new

    # The refit as it was (same run): every vote read again, both fits over every row.
    started = time.perf_counter()
    battles, _ = counted_battles()
    assert battles is not None
    fit_ratings(battles, style=True, ci="sandwich")
    fit_ratings(battles.without_style(), style=False, ci="sandwich")
    old_refit_s = time.perf_counter() - started
    del battles

    live_inputs_forget()  # a fresh site process: its first refit reads every vote
    started = time.perf_counter()
    assert leaderboard_refresh(holder="bench") is not None
    refit_s = time.perf_counter() - started

    def vote() -> None:
        battle = Battle.objects.create(prompt="p", voter_key="v", ip_hash="ip", state="complete")
        for side, model in (("a", 0), ("b", 1)):
            Answer.objects.create(
                battle=battle, side=side, contestant_id=_contestant_id(data.models[model]), tokens=9
            )
        Vote.objects.create(
            battle=battle,
            choice="a",
            counted=True,
            voter_key="v",
            ip_hash="ip",
            seconds_after_answers=5,
        )

    from arena.battles.models import Answer, Battle, Vote

    time.sleep(REFIT_MIN_INTERVAL_SECONDS)
    voted = time.perf_counter()
    vote()
    snapshot = leaderboard_refresh(holder="bench")
    vote_to_screens_s = time.perf_counter() - voted
    assert snapshot is not None and snapshot.n_battles == len(data) + 1

    # Where the time of one more vote goes, step by step (the same steps as the refit).
    time.sleep(REFIT_MIN_INTERVAL_SECONDS)
    vote()
    # Wall and this process's CPU seconds (PostgreSQL's own work is in the wall time only):
    # on a loaded machine the CPU seconds say what the step costs.
    steps: dict[str, tuple[float, float]] = {}
    for name, step in (
        ("refit due? (count, newest vote)", lambda: services._live_refit_due(None)),
        ("exclusions summary", exclusions_summary),
        ("live battles (new votes only)", live_battles),
    ):
        started, cpu = time.perf_counter(), time.process_time()
        result = step()
        steps[name] = (time.perf_counter() - started, time.process_time() - cpu)
    assert result.read == "new votes" and result.votes_read == 1, result
    started, cpu = time.perf_counter(), time.process_time()
    services.snapshot_unsaved(result.battles, source="live", ci="sandwich")
    steps["both fits and analyses"] = (time.perf_counter() - started, time.process_time() - cpu)
    return {
        "read_s": new_s,
        "read_reference_s": old_s,
        "old_refit_s": old_refit_s,
        "refit_s": refit_s,
        "vote_to_screens_s": vote_to_screens_s,
        "steps": steps,
    }


def _contestant_id(name: str) -> int:
    from arena.serving.models import Contestant

    return Contestant.objects.get(display_name=name).pk


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database (the bench makes a scratch one)")

    print(
        f"{args.battles:,} battles, {args.models} models, seed {args.seed}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    started = time.perf_counter()
    data = Data(n_battles=args.battles, n_models=args.models, seed=args.seed)
    python = sys.executable
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "battles.jsonl"
        write_export(data, export)
        size_mb = export.stat().st_size / 2**20
        print(
            f"export written: {size_mb:,.0f} MB in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        command = ["manage.py", "ratings", "--votes", str(export), "--json"]
        sandwich_s, sandwich_mb, out = timed_process([python, *command, "--ci", "sandwich"])
        ours = json.loads(out)
        print(
            f"ratings --votes --ci sandwich: {sandwich_s:.1f} s, {sandwich_mb:,.0f} MB", flush=True
        )
        reference_s, reference_mb, out = timed_process(
            [python, "-c", REFERENCE, *command[2:], "--ci", "sandwich"]
        )
        assert json.loads(out) == ours, "the reference reader gives another table"
        print(
            f"  reference (record-by-record): {reference_s:.1f} s, {reference_mb:,.0f} MB",
            flush=True,
        )
        bootstrap_s, bootstrap_mb, _ = timed_process([python, *command])
        print(
            f"ratings --votes (100-round bootstrap): {bootstrap_s:.1f} s, {bootstrap_mb:,.0f} MB",
            flush=True,
        )

    os.environ["DATABASE_URL"] = scratch_database(url, create=True)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        fill_database(data)
        print(f"database filled (COPY) in {time.perf_counter() - started:.1f} s", flush=True)
        db = database_figures(data)
    finally:
        connections.close_all()
        if not args.keep:
            scratch_database(url, create=False)

    targets = {
        "ratings --votes (sandwich) <= 10 s": sandwich_s <= 10,
        "ratings --votes (bootstrap) <= 10 s": bootstrap_s <= 10,
        "ratings --votes < 1 GB resident": max(sandwich_mb, bootstrap_mb) < 1024,
        "live refit from PostgreSQL, all votes read <= 5 s": db["refit_s"] <= 5,
        "a vote on live screens within 1 s": db["vote_to_screens_s"] <= 1,
    }
    print(f"\nload average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'':38} {'ours':>9} {'reference':>10} {'ratio':>7}")
    print(
        f"{'ratings --votes --ci sandwich (s)':38} {sandwich_s:>9.1f} {reference_s:>10.1f} "
        f"{reference_s / sandwich_s:>6.1f}x"
    )
    print(
        f"{'  peak resident memory (MB)':38} {sandwich_mb:>9,.0f} {reference_mb:>10,.0f} "
        f"{reference_mb / sandwich_mb:>6.1f}x"
    )
    print(f"{'ratings --votes, bootstrap (s, MB)':38} {bootstrap_s:>9.1f} {bootstrap_mb:>10,.0f}")
    print(
        f"{f'read {len(data):,} counted votes (s)':38} {db['read_s']:>9.2f} "
        f"{db['read_reference_s']:>10.2f} {db['read_reference_s'] / db['read_s']:>6.1f}x"
    )
    print(
        f"{'live refit, all votes read (s)':38} {db['refit_s']:>9.2f} {db['old_refit_s']:>10.2f} "
        f"{db['old_refit_s'] / db['refit_s']:>6.1f}x"
    )
    print(
        f"{'one vote to live screens (s)':38} {db['vote_to_screens_s']:>9.2f} "
        f"{db['old_refit_s']:>10.2f} {db['old_refit_s'] / db['vote_to_screens_s']:>6.1f}x"
    )
    print("  of which (one more vote, each step timed alone; wall s, CPU s of this process):")
    for name, (seconds, cpu) in db["steps"].items():
        print(f"    {name:34} {seconds:>9.2f} {cpu:>10.2f}")
    print(
        "  (reference of both live rows: the refit as it was, reading every vote and "
        "fitting every row raw)"
    )
    print()
    for name, met in targets.items():
        print(f"{'met   ' if met else 'MISSED'} {name}")
    if not all(targets.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
