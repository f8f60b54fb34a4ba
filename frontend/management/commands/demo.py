from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agents.models import Agent
from arena.battles.selectors import default_prompts
from arena.battles.services import prompts_load
from arena.competition.models import Competition
from arena.leaderboard.services import phase_leaderboard_fit
from arena.phases.demo import (
    COMPETITION,
    HARNESS_AGENT,
    DemoOutcome,
    Say,
    StageClock,
    agent_change_lines,
    agent_changes,
    agent_processes_end,
    agents_provision,
    agents_run,
    arena_close_now,
    audit_lines,
    base_model_share,
    benchmark_lines,
    cluster_jobs_cancel,
    competition_start,
    contestants_silent,
    evaluations_start,
    evaluations_unfinished,
    evaluations_wait,
    firewall_ensure,
    harness_agent_provision,
    harness_run_wait,
    leaderboard_lines,
    leftovers,
    live_events,
    nominations_of,
    phase_end_now,
    runs_end,
    scripted_upstream_start,
    serve,
    tick,
    training_environment_ensure,
)
from arena.phases.serving import ArenaServers
from evalsuite import hub
from frontend.crowd import crowd_run


@dataclass
class _Started:
    """What the demo has started so far, for its stopping."""

    site: subprocess.Popen[bytes] | None = None
    upstream: subprocess.Popen[bytes] | None = None
    scout: Agent | None = None
    agents: list[Agent] = field(default_factory=list)
    servers: ArenaServers = field(default_factory=ArenaServers)


class Command(BaseCommand):
    help = (
        "Run a whole small competition on embedded defaults: build the tiny models, provision "
        "three reference agents and one driven by the platform's harness (supervised, on a "
        "scripted model), phase 1 (real training), freeze and serve, the arena with a "
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
        # Benchmarks read the project's fixtures in each data set's hub schema unless an
        # organizer points the demo at a fetched hub cache (`manage.py evals fetch`).
        os.environ.setdefault(hub.CACHE_ENV, str(hub.FIXTURE_CACHE))
        clock = StageClock()
        outcome = DemoOutcome()
        say = self._say
        clock.stage("database")
        self._step("database")
        self._fresh_start()
        call_command("migrate", interactive=False, verbosity=0)
        prompts_load(texts=default_prompts())

        base, instruct = self._prerequisites(clock)
        started = _Started()
        finished = interrupted = False  # finished: the verdict is given
        stop = threading.Event()
        signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C, whatever step it is in
        # Ctrl-C stops it even where it was started with SIGINT ignored (a background job of a
        # script), which Python would otherwise keep ignoring.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        url = f"http://{host}:{port}"
        try:
            clock.stage("site")
            self._step("voting site and agent API (daphne)")
            started.site = site = _start_site(host, port)
            # Agents reach the site through the gateway port only (the firewall closes `port`).
            settings.AGENTS_ARENA_URL = f"http://{host}:{settings.AGENTS_GATEWAY_PORT}"
            say(f"the site is up at {url}/ (the arena has models once phase 1 is served)")
            self._competition(
                started, outcome, clock, url=url, base=base, instruct=instruct, crowd=crowd,
                votes=votes,
            )  # fmt: skip
            clock.finish()
            self._step("wall time by stage")
            for name, seconds in clock.stages:
                say(f"  {name:<28} {seconds:6.0f} s")
            say(f"  {'total':<28} {sum(s for _, s in clock.stages):6.0f} s")
            self._verdict(outcome)
            finished = True
            # With --exit it stops here; a `return` would skip the exit status below.
            if not options["exit"]:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"\nRSI Arena is up at {url}/ — vote, see {url}/leaderboard/, the"
                        f" organizer dashboard at {url}/organizer/ and {HARNESS_AGENT}'s session"
                        f" at {url}/organizer/agents/{HARNESS_AGENT}/live. Ctrl-C stops"
                        " everything.\n"
                    )
                )
                while not stop.wait(1.0):
                    if site.poll() is not None:
                        raise CommandError(f"the site exited with code {site.returncode}")
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.stdout.write("\nstopping…")
            if started.site is not None and started.site.poll() is None:
                os.killpg(started.site.pid, signal.SIGTERM)
                try:
                    started.site.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(started.site.pid, signal.SIGKILL)
            started.servers.stop()
            runs_left = runs_end(say)
            if started.upstream is not None and started.upstream.poll() is None:
                os.killpg(started.upstream.pid, signal.SIGTERM)
                started.upstream.wait(timeout=10)
            cluster_jobs_cancel(say)
            everyone = [*started.agents, *([started.scout] if started.scout else [])]
            agent_processes_end(everyone)
            left = [*runs_left, *leftovers(everyone)]
            for line in left:
                self.stderr.write(f"    still running: {line}")
            self.stdout.write(
                "stopped cleanly: nothing the demo started is still running"
                if not left
                else "stopped, but some of what the demo started is still running (above)"
            )
        # Stopped once it has given its verdict (serving the site for a person), the demo
        # exits by that verdict; stopped before, it did not finish.
        if interrupted and not finished:
            raise CommandError("interrupted before the end: the demo did not finish")
        if outcome.failed:
            raise CommandError(outcome.reason())
        if left:
            raise CommandError(f"the demo left {len(left)} process(es) running")
        if interrupted:
            self.stdout.write(
                self.style.SUCCESS(
                    f"the demo had finished ({len(outcome.worked)} checks passed); stopped cleanly"
                )
            )

    def _prerequisites(self, clock: StageClock) -> tuple[Path, Path]:
        """What the agents run and read, built here: the tiny models, the training environment
        and the firewall, and the base model published read-only. Returns the base model every
        agent reads and the instruct reference."""
        from infra.tiny_models import build_tiny_models  # torch: imported only to build

        clock.stage("tiny models")
        self._step(f"tiny models in {settings.ARENA_MODELS_DIR}")
        build_tiny_models(settings.ARENA_MODELS_DIR, log=lambda line: self._say(f"    {line}"))
        instruct = settings.ARENA_MODELS_DIR / "instruct"

        clock.stage("training environment")
        self._step(f"the agents' training environment in {settings.AGENTS_TRAIN_ENV}")
        try:
            training_environment_ensure(self._say)
            firewall_ensure(self._say)
        except RuntimeError as failed:
            raise CommandError(str(failed)) from None
        base = base_model_share(settings.ARENA_MODELS_DIR / "base")
        self._say(f"the base model every agent reads: {base}")
        return base, instruct

    def _competition(
        self,
        started: _Started,
        outcome: DemoOutcome,
        clock: StageClock,
        *,
        url: str,
        base: Path,
        instruct: Path,
        crowd: bool,
        votes: int,
    ) -> None:
        """The competition, from its agents to the final report, each check in `outcome`; what
        it starts goes in `started`, for the demo's stopping."""
        say = self._say
        clock.stage("agents")
        self._step(
            "competition and its agents: three reference agents, and one the platform's"
            " harness drives"
        )
        competition = competition_start(base, instruct)
        started.agents = agents = agents_provision(say)
        started.scout = scout = harness_agent_provision(say)
        started.upstream = scripted_upstream_start(base, say)
        tick(say)  # phase 1 starts, and with it the supervised run of the harness's agent
        phase_1, phase_2 = competition.phases.order_by("number")

        for phase, number in ((phase_1, 1), (phase_2, 2)):
            clock.stage(f"{phase.label} training")
            self._step(
                f"{phase.label}: the agents train ({'SFT/LoRA' if number == 1 else 'with their votes'})"
            )
            codes = agents_run(agents, number, say, base=base)
            run = harness_run_wait(scout, phase, say)
            nominated = nominations_of(phase)
            outcome.check(
                run is not None and run.state == "finished",
                f"{scout.name} (the platform's harness) ran {phase.label} to the end",
                f"{scout.name}'s harness run in {phase.label} did not finish: "
                + (f"{run.state}, {run.detail}" if run else "the supervisor never started it"),
            )
            outcome.check(
                scout.name in nominated,
                f"{scout.name} nominated a checkpoint for {phase.label}",
                f"{scout.name} nominated nothing for {phase.label}",
            )
            # This phase's session only: the events since its run was created (the page
            # gives times to the millisecond).
            began = run.created_at.replace(microsecond=0) if run is not None else None
            watched = [
                event
                for event in live_events(url, scout)
                if began is not None and datetime.fromisoformat(event["at"]) >= began
            ]
            tools = [e for e in watched if e.get("kind") == "tool_call"]
            models = [e for e in watched if e.get("kind") == "model_call"]
            outcome.check(
                bool(tools) and bool(models) and "arena-agent nominate" in str(watched),
                f"{scout.name}'s live page shows its trajectory ({len(models)} model calls,"
                f" {len(tools)} tool calls, the nomination among them)",
                f"{scout.name}'s live page shows {len(watched)} events, not its session",
            )
            for name, code in codes.items():
                outcome.check(
                    code == 0,
                    f"{name} ran {phase.label} to the end",
                    f"{name} stopped with an error in {phase.label} (exit code {code})",
                )
                outcome.check(
                    name in nominated,
                    f"{name} nominated a checkpoint for {phase.label}",
                    f"{name} nominated nothing for {phase.label}",
                )
            say(f"nominated: {', '.join(nominated) or 'nobody'}")

            clock.stage(f"{phase.label} freeze and serving")
            self._step(f"{phase.label}: freeze, and serve the nominated models")
            phase.refresh_from_db()
            phase_end_now(phase)
            tick(say)
            serve(started.servers, say)
            evaluations_start(say)

            clock.stage(f"{phase.label} arena")
            if crowd:
                self._step(f"{phase.label}: the arena — a simulated crowd votes ({votes} battles)")
                for line in crowd_vote(url, votes, say, seed=number).splitlines():
                    say(line)
            else:
                self._step(f"{phase.label}: the arena is open at {url}/ — vote, then press Enter")
                input()
            silent = contestants_silent(phase)
            outcome.check(
                not silent,
                f"every model served in {phase.label} answered in the arena",
                f"served in {phase.label} but never answered: {', '.join(silent)}",
            )
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
            unfinished = evaluations_unfinished(phase)
            outcome.check(
                not unfinished,
                f"every served model of {phase.label} was evaluated",
                f"{phase.label} evaluations that did not finish: {'; '.join(unfinished)}",
            )
        for line in audit_lines(None, say):
            say(line)

        clock.stage("final report")
        self._step("the final leaderboard and each agent's change")
        changes = agent_changes([*agents, scout])
        for line in agent_change_lines(changes):
            say(line)
        for row in changes:
            outcome.check(
                row.change is not None,
                f"{row.agent} has a score in both phases and a change",
                f"{row.agent} has no number in the final table"
                f" (phase-1 {_number(row.phase_1)}, phase-2 {_number(row.phase_2)},"
                f" change {_number(row.change)})",
            )

    def _verdict(self, outcome: DemoOutcome) -> None:
        self._step("what worked and what did not")
        for line in outcome.lines():
            self.stdout.write(
                self.style.SUCCESS(line) if line.startswith("  ok") else self.style.ERROR(line)
            )
        if outcome.failed:
            self.stdout.write(self.style.ERROR(f"\n{outcome.reason()}"))
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nthe demo worked: {len(outcome.worked)} checks passed, none failed"
                )
            )

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


def crowd_vote(url: str, battles: int, say: Say, *, seed: int) -> str:
    """A simulated crowd votes through the site, as people would (the crowd is the site's:
    the engine's demo module drives everything else)."""

    def bar(done: int, wanted: int) -> None:
        width = 30
        filled = int(width * done / max(wanted, 1))
        say(f"votes [{'#' * filled}{'.' * (width - filled)}] {done}/{wanted}")

    report = crowd_run(url=url, voters=4, battles=battles, seed=seed, max_seconds=300, progress=bar)
    return report.summary()


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _start_site(host: str, port: int) -> subprocess.Popen[bytes]:
    (settings.VAR_DIR / "logs").mkdir(parents=True, exist_ok=True)
    site = subprocess.Popen(
        [
            sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
            # The agent gateway: the same site, answering only /api/ and /proxy/ there.
            "-e", f"tcp:port={settings.AGENTS_GATEWAY_PORT}:interface={host}",
            "--access-log", str(settings.VAR_DIR / "logs" / "site-access.log"),
            # Daphne rejects (HTTP 403) a WebSocket the app has not accepted within 5 s. The demo
            # shares 2 cores with training, 6 model servers and the evaluation jobs; as these
            # started, a battle's socket took 6 s to accept, and the crowd stopped on a 403.
            "--websocket_connect_timeout", "60",
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
    _wait_for_port(host, settings.AGENTS_GATEWAY_PORT, site)
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
