from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from infra.tiny_models import build_tiny_models


class Command(BaseCommand):
    help = (
        "Model checkpoints: build the tiny offline model kit (tokenizer, base, instruct, markdown)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        build = actions.add_parser(
            "build-tiny", help="build the tiny models deterministically from a seed, no download"
        )
        build.add_argument("--out", type=Path, default=None, help="default: ARENA_MODELS_DIR")
        build.add_argument("--seed", type=int, default=0)
        build.add_argument("--force", action="store_true", help="rebuild even if up to date")

    def handle(self, *args: object, **options: object) -> None:
        out = options["out"] or settings.ARENA_MODELS_DIR
        assert isinstance(out, Path) and isinstance(options["seed"], int)
        manifest = build_tiny_models(
            out,
            seed=options["seed"],
            force=bool(options["force"]),
            log=lambda line: self.stdout.write(str(line)),
        )
        self.stdout.write(self.style.SUCCESS(f"tiny models ready in {out} (seed {manifest.seed})"))
