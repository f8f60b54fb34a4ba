from __future__ import annotations

import signal
import threading
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.serving.backend_choice import serving_backend_from_settings
from arena.serving.services import contestant_register, contestants_deactivate


class Command(BaseCommand):
    help = (
        "Serve checkpoints as arena contestants until interrupted: starts one supervised model "
        "server per checkpoint, registers each as an active contestant, and deactivates them "
        "on exit. Arguments are NAME=CHECKPOINT_DIR."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("contestants", nargs="+", metavar="NAME=CHECKPOINT_DIR")
        parser.add_argument("--weight", type=float, default=1.0, help="sampling weight of each")

    def handle(self, *args: object, **options: object) -> None:
        pairs = parse_contestant_specs(options["contestants"])  # type: ignore[arg-type]
        backend = serving_backend_from_settings()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            self.stdout.write(f"starting {len(pairs)} model servers…")
            endpoints = backend.start([path for _, path in pairs])
            for (name, path), endpoint in zip(pairs, endpoints, strict=True):
                contestant_register(
                    display_name=name,
                    endpoint=endpoint,
                    checkpoint_path=str(path),
                    weight=float(options["weight"]),  # type: ignore[arg-type]
                )
                self.stdout.write(f"  {name}: {endpoint.base_url}")
            self.stdout.write("serving; Ctrl-C to stop")
            stop.wait()
        except KeyboardInterrupt:
            pass
        finally:
            contestants_deactivate(display_names=[name for name, _ in pairs])
            backend.stop()
            self.stdout.write("stopped")


def parse_contestant_specs(specs: list[str]) -> list[tuple[str, Path]]:
    pairs: list[tuple[str, Path]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise CommandError(f"{spec!r} is not NAME=CHECKPOINT_DIR")
        checkpoint = Path(path).expanduser().resolve()
        if not (checkpoint / "config.json").is_file():
            raise CommandError(f"{checkpoint} is not a model checkpoint (no config.json)")
        pairs.append((name.strip(), checkpoint))
    if len({name for name, _ in pairs}) != len(pairs):
        raise CommandError("each contestant needs its own name")
    return pairs
