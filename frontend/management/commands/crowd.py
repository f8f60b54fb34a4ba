from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from frontend.crowd import DEFAULT_NOISE, CrowdRefused, crowd_run


class Command(BaseCommand):
    help = (
        "A simulated crowd: N voters vote on M battles through the arena's real HTTP and "
        "WebSocket endpoints, preferring answers that end cleanly and use the prompt's words "
        "(see frontend/crowd.py). Loopback URLs only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the arena (loopback)")
        parser.add_argument("--voters", type=int, default=4, help="voters at once (sessions)")
        parser.add_argument("--battles", type=int, default=20, help="battles to start in all")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time bound")
        parser.add_argument(
            "--noise", type=float, default=DEFAULT_NOISE, help="share of random votes (0..1)"
        )
        parser.add_argument(
            "--bots", type=int, default=0, help="how many of the voters are bots (see --bot-mark)"
        )
        parser.add_argument(
            "--bot-mark",
            default="",
            help="bots vote for the side whose answer contains this text (a model's watermark)",
        )
        parser.add_argument(
            "--every",
            type=int,
            default=0,
            help="a progress line every N votes (default: ~10 lines)",
        )

    def handle(self, *args: object, **options: Any) -> None:
        battles = int(options["battles"])
        every = options["every"] or max(1, battles // 10)
        shown = [0]

        def progress(votes: int, target: int) -> None:
            if votes and votes != shown[0] and (votes % every == 0 or votes == target):
                shown[0] = votes
                width = 30
                filled = round(width * votes / target)
                self.stdout.write(f"  [{'#' * filled}{'.' * (width - filled)}] {votes}/{target}")

        self.stdout.write(
            f"crowd: {options['voters']} voters, up to {battles} battles, "
            f"at most {options['max_seconds']:g} s, against {options['url']}"
        )
        try:
            report = crowd_run(
                url=options["url"],
                voters=int(options["voters"]),
                battles=battles,
                seed=int(options["seed"]),
                max_seconds=float(options["max_seconds"]),
                noise=float(options["noise"]),
                progress=progress,
                bots=int(options["bots"]),
                bot_mark=str(options["bot_mark"]),
            )
        except CrowdRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(report.summary())
        if report.errors and not report.votes:
            raise CommandError(
                f"the crowd could not vote: {report.errors[0]} (is the arena running at {report.url}?)"
            )
