from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.phases.publish import HubPublisher
from arena.phases.release import ReleaseRefused, phase_for_release, release_push, release_write


class Command(BaseCommand):
    help = (
        "Release a phase as the study did: each nominated checkpoint as a hub model repository "
        "(weights, tokenizer, model card with its benchmark results and audit status) and the "
        "phase's battles as a hub data set (JSONL and Parquet), written to --out; --push ORG "
        "uploads them to the Hugging Face hub."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--phase", required=True, help="the phase label, e.g. phase-1")
        parser.add_argument("--out", required=True, type=Path, help="a new or empty folder")
        parser.add_argument("--push", metavar="ORG", help="upload to this hub organisation")
        parser.add_argument("--private", action="store_true", help="pushed repositories private")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            phase = phase_for_release(options["phase"])
            release = release_write(phase=phase, out=options["out"], progress=self.stdout.write)
        except ReleaseRefused as refused:
            raise CommandError(f"{refused} (nothing was written)") from None
        self.stdout.write(
            self.style.SUCCESS(f"{len(release.repos)} repositories written to {release.out}")
        )
        if options["push"]:
            publisher = HubPublisher(private=options["private"])
            release_push(
                release=release, org=options["push"], publisher=publisher,
                progress=self.stdout.write,
            )  # fmt: skip
            self.stdout.write(self.style.SUCCESS(f"pushed to {options['push']}"))
