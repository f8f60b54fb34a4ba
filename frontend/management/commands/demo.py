from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from arena.battles.selectors import default_prompts
from arena.battles.services import prompts_load
from arena.competition.models import Competition
from arena.leaderboard.services import phase_leaderboard_fit
from arena.phases.serving import ArenaServers
from frontend.competition_demo import (
    COMPETITION,
    StageClock,
    agent_changes,
    agents_provision,
    agents_run,
    arena_close_now,
    audit_lines,
    benchmark_lines,
    competition_start,
    crowd_vote,
    evaluations_start,
    evaluations_wait,
    leaderboard_lines,
    nominations_of,
    phase_end_now,
    serve,
    tick,
)
from infra.tiny_models import build_tiny_models


class Command(BaseCommand):
    help = (
        "Run a whole small competition on embedded defaults: build the tiny models, provision "
        "three reference agents, phase 1 (real training), freeze and serve, the arena with a "
        "simulated crowd, phase 2 with each agent's own votes as feedback, and the final "
        "leaderboard; then keep the site up for a person to look around and vote (Ctrl-C stops)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-crowd", action="store_true", help="people vote, not the crowd")
        parser.add_argument(
            "--votes", type=int, default=80, help="crowd battles per phase (default 80)"
        )
        parser.add_argument(
            "--exit", action="store_true", help="stop at the end instead of serving the site"
        )

    def handle(self, *args: object, **options: object) -> None:
        host, port = str(options["host"]), int(options["port"])  # type: ignore[call-overload]
        votes = int(options["votes"])  # type: ignore[call-overload]
        crowd = not options["no_crowd"]
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is in use; pass --port to use another")
        if os.geteuid() != 0:
            raise CommandError("the demo provisions agents as Unix users: run it as root")
        clock = StageClock()
        say = self._say
        clock.stage("database")
        self._step("database")
        self._fresh_start()
        call_command("migrate", interactive=False, verbosity=0)
        prompts_load(texts=default_prompts())

        clock.stage("tiny models")
        self._step(f"tiny models in {settings.ARENA_MODELS_DIR}")
        build_tiny_models(settings.ARENA_MODELS_DIR, log=lambda line: say(f"    {line}"))
        base = settings.ARENA_MODELS_DIR / "base"
        instruct = settings.ARENA_MODELS_DIR / "instruct"

        site: subprocess.Popen[bytes] | None = None
        servers = ArenaServers()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C, whatever step it is in
        url = f"http://{host}:{port}"
        try:
            clock.stage("site")
            self._step("voting site and agent API (daphne)")
            site = _start_site(host, port)
            settings.AGENTS_ARENA_URL = url
            say(f"the site is up at {url}/ (the arena has models once phase 1 is served)")

            clock.stage("agents")
            self._step("competition and three reference agents")
            competition = competition_start(base, instruct)
            agents = agents_provision(say)
            tick(say)
            phase_1, phase_2 = competition.phases.order_by("number")

            for phase, number in ((phase_1, 1), (phase_2, 2)):
                clock.stage(f"{phase.label} training")
                self._step(
                    f"{phase.label}: the agents train ({'SFT/LoRA' if number == 1 else 'with their votes'})"
                )
                codes = agents_run(agents, number, say, base=base)
                failed = [name for name, code in codes.items() if code != 0]
                if failed:
                    say(f"these agents stopped with an error: {', '.join(failed)}")
                say(f"nominated: {', '.join(nominations_of(phase)) or 'nobody'}")

                clock.stage(f"{phase.label} freeze and serving")
                self._step(f"{phase.label}: freeze, and serve the nominated models")
                phase.refresh_from_db()
                phase_end_now(phase)
                tick(say)
                serve(servers, say)
                evaluations_start(say)

                clock.stage(f"{phase.label} arena")
                if crowd:
                    self._step(
                        f"{phase.label}: the arena — a simulated crowd votes ({votes} battles)"
                    )
                    for line in crowd_vote(url, votes, say, seed=number).splitlines():
                        say(line)
                else:
                    self._step(
                        f"{phase.label}: the arena is open at {url}/ — vote, then press Enter"
                    )
                    input()
                if number == 1:
                    arena_close_now(competition, phase)  # phase 2 starts: feedback goes out
                    tick(say)
                else:
                    # The last arena stays open for people; its table so far is the result.
                    phase_leaderboard_fit(phase=phase.label)
                for line in leaderboard_lines(phase.label):
                    say(line)

            clock.stage("benchmarks and audits")
            self._step("benchmarks (the evaluation jobs) and the rule-violation audit")
            evaluations_wait(say)
            for phase in (phase_1, phase_2):
                for line in benchmark_lines(phase):
                    say(line)
            for line in audit_lines(None, say):
                say(line)

            clock.stage("final report")
            self._step("the final leaderboard and each agent's change")
            for line in agent_changes(agents):
                say(line)
            clock.finish()
            self._step("wall time by stage")
            for name, seconds in clock.stages:
                say(f"  {name:<28} {seconds:6.0f} s")
            say(f"  {'total':<28} {sum(s for _, s in clock.stages):6.0f} s")
            if options["exit"]:
                return
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nRSI Arena is up at {url}/ — vote, see {url}/leaderboard/ and the organizer"
                    f" dashboard at {url}/organizer/. Ctrl-C stops everything.\n"
                )
            )
            while not stop.wait(1.0):
                if site.poll() is not None:
                    raise CommandError(f"the site exited with code {site.returncode}")
        except KeyboardInterrupt:
            pass
        finally:
            self.stdout.write("\nstopping…")
            if site is not None and site.poll() is None:
                os.killpg(site.pid, signal.SIGTERM)
                try:
                    site.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(site.pid, signal.SIGKILL)
            servers.stop()
            self.stdout.write("stopped cleanly")

    def _fresh_start(self) -> None:
        """The demo is a whole competition from scratch. On the embedded defaults its SQLite
        database and local cluster start empty, the previous run's kept beside them as
        `*.previous`; a database named by DATABASE_URL is never moved or emptied."""
        database = settings.DATABASES["default"]
        if "DATABASE_URL" in os.environ or "sqlite" not in database["ENGINE"]:
            call_command("migrate", interactive=False, verbosity=0)
            if Competition.objects.filter(name=COMPETITION).exists():
                raise CommandError(
                    "this database already holds a demo competition: the demo runs from scratch,"
                    " so unset DATABASE_URL (it then uses var/arena.sqlite3, moving an earlier"
                    " one aside) or point it at an empty database"
                )
            return
        connections.close_all()
        for path in (Path(database["NAME"]), settings.VAR_DIR / "local-jobs"):
            if path.exists():
                kept = path.with_name(path.name + ".previous")
                if kept.is_dir():
                    shutil.rmtree(kept)
                elif kept.exists():
                    kept.unlink()
                path.rename(kept)
                self._say(f"an earlier run's {path.name} is kept as {kept}")

    def _step(self, what: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {what}"))

    def _say(self, line: str) -> None:
        self.stdout.write(f"    {line}")
        self.stdout.flush()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _start_site(host: str, port: int) -> subprocess.Popen[bytes]:
    (settings.VAR_DIR / "logs").mkdir(parents=True, exist_ok=True)
    site = subprocess.Popen(
        [
            sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
            "--access-log", str(settings.VAR_DIR / "logs" / "site-access.log"),
            "arena.asgi:application",
        ],
        # The crowd votes from one address, faster than the limits meant for people allow.
        env={
            **os.environ,
            "ARENA_BATTLES_PER_MINUTE": "1000",
            "ARENA_BATTLES_PER_MINUTE_PER_IP": "10000",
        },
        start_new_session=True,
    )  # fmt: skip
    _wait_for_port(host, port, site)
    return site


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _wait_for_port(
    host: str, port: int, process: subprocess.Popen[bytes], timeout_s: float = 60
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CommandError(f"the site exited with code {process.returncode} while starting")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise CommandError(f"the site did not start listening on {host}:{port}")
