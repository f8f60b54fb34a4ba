from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.battles.selectors import default_prompts
from arena.battles.services import prompts_load
from arena.serving.backends import serving_backend_from_settings
from arena.serving.models import Contestant
from arena.serving.services import contestant_register
from infra.tiny_models import build_tiny_models

# The demo's contestants: display name -> checkpoint directory under ARENA_MODELS_DIR.
DEMO_CONTESTANTS = {"tiny-base": "base", "tiny-instruct": "instruct", "tiny-markdown": "markdown"}


class Command(BaseCommand):
    help = (
        "Run the arena on embedded defaults: build the tiny models, start one model server per "
        "contestant, and serve the voting site until Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: object, **options: object) -> None:
        host, port = str(options["host"]), int(options["port"])  # type: ignore[call-overload]
        if not _port_free(host, port):
            raise CommandError(f"{host}:{port} is in use; pass --port to use another")
        started = time.monotonic()
        self._step("database")
        call_command("migrate", interactive=False, verbosity=0)
        prompts_load(texts=default_prompts())

        self._step(f"tiny models in {settings.ARENA_MODELS_DIR}")
        build_tiny_models(
            settings.ARENA_MODELS_DIR, log=lambda line: self.stdout.write(f"    {line}")
        )

        self._step("model servers (transformers serve, one per contestant)")
        backend = serving_backend_from_settings()
        site: subprocess.Popen[bytes] | None = None
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            checkpoints = [settings.ARENA_MODELS_DIR / d for d in DEMO_CONTESTANTS.values()]
            endpoints = backend.start(checkpoints)
            Contestant.objects.exclude(display_name__in=DEMO_CONTESTANTS).update(active=False)
            for name, checkpoint, endpoint in zip(
                DEMO_CONTESTANTS, checkpoints, endpoints, strict=True
            ):
                contestant_register(
                    display_name=name, endpoint=endpoint, checkpoint_path=str(checkpoint)
                )
                self.stdout.write(f"    {name:<14} {endpoint.base_url}")

            self._step("voting site (daphne)")
            site = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    host,
                    "-p",
                    str(port),
                    "--access-log",
                    str(settings.VAR_DIR / "logs" / "site-access.log"),
                    "arena.asgi:application",
                ],
                env=os.environ.copy(),
                start_new_session=True,
            )
            _wait_for_port(host, port, site)
            url = f"http://{host}:{port}/"
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nRSI Arena is ready at {url}  (started in {time.monotonic() - started:.0f} s)\n"
                    "Open it in a browser, type a prompt, and vote. Ctrl-C stops everything.\n"
                    f"Leaderboard: {url}leaderboard/  ·  live screen: {url}leaderboard/live\n"
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
            backend.stop()
            Contestant.objects.filter(display_name__in=DEMO_CONTESTANTS).update(active=False)
            self.stdout.write("stopped cleanly")

    def _step(self, what: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {what}"))


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
