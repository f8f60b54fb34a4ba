from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from arena.phases.reports import default_out_dir, parse_day, reports_write


class Command(BaseCommand):
    help = "Organizer reports. `reports daily`: one HTML and one Markdown report per agent."

    def add_arguments(self, parser: CommandParser) -> None:
        kinds = parser.add_subparsers(dest="kind", required=True)
        daily = kinds.add_parser("daily", help="what each agent did on one day")
        daily.add_argument("--date", help="YYYY-MM-DD (default: today, in the site's time zone)")
        daily.add_argument("--out", help="output folder (default: var/reports/<date>/)")

    def handle(self, *args: object, **options: Any) -> None:
        try:
            day = parse_day(options["date"]) if options["date"] else timezone.localdate()
        except ValueError as bad:
            raise CommandError(str(bad)) from None
        out = Path(options["out"]) if options["out"] else default_out_dir(day)
        self.stdout.write(f"daily reports for {day.isoformat()} -> {out}")
        try:
            written = reports_write(day=day, out_dir=out, progress=self.stdout.write)
        except OSError as error:
            raise CommandError(f"could not write the reports to {out}: {error}") from None
        self.stdout.write(
            self.style.SUCCESS(f"wrote {len(written)} files; open {out / 'index.html'}")
        )
