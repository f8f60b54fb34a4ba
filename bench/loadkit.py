"""What the load benchmarks share: scripted instant contestants, the arena's workers, and the
meters that read what each process spent (CPU from /proc, resident memory).

The arena runs as it runs in production: by default the deployment kit (`infra/deploy/up`:
nginx in front of N ASGI workers); `--own-workers` starts N daphne processes here instead
(no nginx: the benchmark spreads its clients over their ports). The contestants are the
test suite's scripted OpenAI-compatible server (tests/support/scripted_llm.py) in a process
of its own, answering at once, so model speed does not count.

The benchmarks write to the database they are given (contestants `load-1..3`, battles,
votes): point DATABASE_URL at a scratch database. One that does not exist yet is created, and
the schema is migrated, before anything runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")

KIT_UP = ROOT / "infra" / "deploy" / "up"
KIT_DOWN = ROOT / "infra" / "deploy" / "down"
LOG_DIR = ROOT / "var" / "bench-logs"

# The answer both scripted contestants give: a realistic markdown answer (a header, a list,
# bold), so the arena's rendering and style features do their usual work.
ANSWER = (
    "## A short answer\n\n"
    "Here is what matters most, in order:\n\n"
    "1. **Start small**: measure before you change anything.\n"
    "2. Keep the *hot path* short, and cache what does not change.\n"
    "3. Write the result down.\n\n"
    "- one more point\n- and another, with `code`\n\n"
    "That is all there is to it, really. Thank you for asking such a good question."
)
CONTESTANTS = ("load-1", "load-2", "load-3")

# The arena's settings for a load run: no reading pause before a vote, no paced release (the
# scripted models are instant), and rate limits that a few hundred simulated sessions from
# one address do not reach.
WORKER_ENV = {
    "ARENA_MIN_VOTE_SECONDS": "0",
    "ARENA_STREAM_CHARS_PER_SECOND": "0",
    "ARENA_BATTLES_PER_MINUTE": "1000000",
    "ARENA_BATTLES_PER_MINUTE_PER_IP": "1000000",
    "ARENA_LOG_LEVEL": "WARNING",
}


def django_setup() -> None:
    """Django set up on DATABASE_URL's database, created (PostgreSQL) and migrated first."""
    import django
    from django.core.management import call_command
    from django.db import OperationalError, connection

    django.setup()
    try:
        connection.ensure_connection()
    except OperationalError as exc:
        if "does not exist" not in str(exc) or connection.vendor != "postgresql":
            raise
        import psycopg
        from psycopg import sql

        params = connection.get_connection_params()
        name = params.pop("dbname")
        params["dbname"] = "postgres"
        print(f"creating the scratch database {name}", flush=True)
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(
    port: int, *, process: subprocess.Popen | None, what: str, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}; see {LOG_DIR}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what} did not listen on port {port} in {timeout_s:g} s"
                ) from None
            time.sleep(0.1)


# -- the scripted contestants ----------------------------------------------------------------


def serve_scripted_models(port: int) -> None:
    """Run the scripted server until killed (the child process's whole life)."""
    from tests.support.scripted_llm import Script, ScriptedLLM

    # Blocked before the server's thread starts, so only sigwait below receives them.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    server = ScriptedLLM(
        scripts={name: Script(text=ANSWER, chunk_chars=24, delay_s=0.0) for name in CONTESTANTS},
        port=port,
    )
    server.start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


@contextmanager
def scripted_models() -> Iterator[tuple[str, subprocess.Popen]]:
    """The scripted server in a process of its own; yields its base URL and the process."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with (LOG_DIR / "scripted-models.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-models", str(port)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, process=process, what="the scripted model server", timeout_s=30)
        yield f"http://127.0.0.1:{port}/v1", process
    finally:
        process.terminate()
        process.wait(timeout=10)


def contestants_for_load(base_url: str) -> None:
    """Make the scripted contestants the only active ones. Refuses a database that has other
    active contestants: the benchmark must not vote into a real arena."""
    from arena.serving.models import Contestant

    others = Contestant.objects.filter(active=True).exclude(display_name__in=CONTESTANTS)
    if others.exists():
        raise SystemExit(
            "this database has other active contestants "
            f"({', '.join(others.values_list('display_name', flat=True)[:5])}): the benchmark "
            "votes into the database it is given; point DATABASE_URL at a scratch one"
        )
    for name in CONTESTANTS:
        Contestant.objects.update_or_create(
            display_name=name,
            defaults={
                "base_url": base_url,
                "served_model_name": name,
                "active": True,
                "weight": 1.0,
            },
        )


# -- the arena's workers ---------------------------------------------------------------------


@dataclass
class Arena:
    urls: list[str]  # where clients connect: the proxy, or each worker's port
    how: str  # a sentence for the report
    _processes: list[subprocess.Popen] = field(default_factory=list)

    def worker_pids(self) -> list[int]:
        if self._processes:
            return [p.pid for p in self._processes if p.poll() is None]
        return asgi_worker_pids()


def asgi_worker_pids() -> list[int]:
    """Processes on this machine serving `arena.asgi` (the kit's workers, whoever started them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"arena.asgi" in cmdline and b"supervisord" not in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def worker_env() -> dict[str, str]:
    return {**os.environ, **WORKER_ENV}


@contextmanager
def arena_running(
    *, url: str | None, own_workers: int, kit_workers: int, code_root: Path = ROOT
) -> Iterator[Arena]:
    """The arena to load: the one at `url`; else `own_workers` daphne processes started here
    (running the code in `code_root`: another checkout, to measure a change against it);
    else the deployment kit with `kit_workers` workers, taken down afterwards."""
    if url:
        yield Arena(urls=[url.rstrip("/")], how=f"the arena at {url} (already running)")
        return
    if own_workers:
        with _own_workers(own_workers, code_root) as arena:
            yield arena
        return
    if not KIT_UP.exists():
        raise SystemExit(
            f"{KIT_UP.relative_to(ROOT)} is not here (the deployment kit, issue 16 item 1): "
            "pass --url for a running arena, or --own-workers N to start N daphne workers "
            "here without nginx"
        )
    port = free_port()
    subprocess.run(
        [str(KIT_UP), "--workers", str(kit_workers), "--port", str(port)],
        cwd=ROOT,
        env=worker_env(),
        check=True,
    )
    try:
        yield Arena(
            urls=[f"http://127.0.0.1:{port}"],
            how=f"the deployment kit: nginx on port {port} in front of {kit_workers} workers",
        )
    finally:
        subprocess.run([str(KIT_DOWN)], cwd=ROOT, env=worker_env(), check=False)


@contextmanager
def _own_workers(count: int, code_root: Path) -> Iterator[Arena]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    ports = [free_port() for _ in range(count)]
    processes = []
    try:
        for index, port in enumerate(ports):
            with (LOG_DIR / f"daphne-{index}.log").open("wb") as log:
                processes.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "daphne",
                            "-b",
                            "127.0.0.1",
                            "-p",
                            str(port),
                            "arena.asgi:application",
                        ],
                        cwd=code_root,
                        env={**worker_env(), "PYTHONPATH": str(code_root)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        for port, process in zip(ports, processes, strict=True):
            wait_for_port(port, process=process, what="a daphne worker", timeout_s=60)
        yield Arena(
            urls=[f"http://127.0.0.1:{port}" for port in ports],
            how=(
                f"{count} daphne workers started by the benchmark (no nginx; clients spread "
                f"over their ports), running {code_root}"
            ),
            _processes=processes,
        )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


# -- meters ----------------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_STAT_TAIL = re.compile(rb"\) (.*)$", re.S)


def cpu_seconds(pid: int, *, with_reaped_children: bool = False) -> float:
    """User + system CPU a process has used so far (0 once it is gone); with its reaped
    children's too, which is how a short-lived PostgreSQL backend's CPU stays counted (in the
    postmaster's)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = _STAT_TAIL.search(raw).group(1).split()  # after "pid (comm) "
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if with_reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pids_named(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


PidsOf = Callable[[], list[int]]


@dataclass
class CpuMeter:
    """CPU seconds spent by named groups of processes between start() and stop(). Each group
    is listed again at the end: a process born during the phase counts from zero, one that
    ended and was reaped counts in its parent's children's time (postgres backends)."""

    groups: dict[str, PidsOf]
    _before: dict[str, dict[int, float]] = field(default_factory=dict)
    _machine_before: tuple[float, float] = (0.0, 0.0)
    spent: dict[str, float] = field(default_factory=dict)
    machine_busy_share: float = 0.0

    def _read(self) -> dict[str, dict[int, float]]:
        return {
            g: {p: cpu_seconds(p, with_reaped_children=True) for p in pids()}
            for g, pids in self.groups.items()
        }

    def start(self) -> None:
        self._before = self._read()
        self._machine_before = machine_busy_seconds()

    def stop(self) -> None:
        after = self._read()
        self.spent = {
            g: sum(now - self._before[g].get(p, 0.0) for p, now in after[g].items())
            for g in self.groups
        }
        busy, total = machine_busy_seconds()
        elapsed_total = total - self._machine_before[1]
        self.machine_busy_share = (
            (busy - self._machine_before[0]) / elapsed_total if elapsed_total else 0.0
        )

    def line(self, seconds: float) -> str:
        cores = os.cpu_count() or 1
        parts = [f"{g} {s / seconds * 100:.0f}%" for g, s in self.spent.items()]
        return (
            "CPU over the phase (100% = one core): "
            + ", ".join(parts)
            + f"; whole machine busy {self.machine_busy_share * 100:.0f}% of {cores} cores"
        )


@contextmanager
def profiled(pids: list[int], out_dir: Path | None, name: str) -> Iterator[None]:
    """py-spy samples each pid into `out_dir/<name>-<pid>.txt` (collapsed stacks) while the
    block runs; does nothing without `out_dir`."""
    if out_dir is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out_dir.mkdir(parents=True, exist_ok=True)
    spies = [
        subprocess.Popen(
            [
                spy,
                "record",
                "--nonblocking",
                "--format",
                "raw",
                "--rate",
                "200",
                "--pid",
                str(pid),
                "--output",
                str(out_dir / f"{name}-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for pid in pids
    ]
    time.sleep(0.5)
    try:
        yield
    finally:
        for process in spies:
            process.send_signal(signal.SIGINT)
        for process in spies:
            process.wait(timeout=30)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--serve-models":
    serve_scripted_models(int(sys.argv[2]))
