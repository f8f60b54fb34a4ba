"""`python manage.py voters screen|list|exclude|restore`: find voters who do not vote like
people, and keep their votes out of the fit (reversibly, on record)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.battles.models import VoterExclusion
from arena.battles.services import ExclusionRefused, voter_exclusion_lift
from arena.leaderboard.screening import FlaggedVoter, voter_screening
from arena.leaderboard.services import leaderboard_refresh, voter_exclude_on_screening

SHOWN_KEY = 12  # characters of a hash shown; any unique prefix of 8 or more is accepted back


class Command(BaseCommand):
    help = (
        "Screen voters (crowd disagreement, one-sided streaks, bursts, many sessions per "
        "network), list exclusions, exclude a session or network from the fit, or restore it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        screen = actions.add_parser("screen", help="list flagged sessions and networks")
        screen.add_argument("--json", action="store_true", help="one JSON object per line")
        actions.add_parser("list", help="every exclusion, in force or lifted")
        exclude = actions.add_parser("exclude", help="leave a voter's votes out of the fit")
        exclude.add_argument("kind", choices=VoterExclusion.Kind.values)
        exclude.add_argument("key", help="the voter's hash, or its first 8+ characters")
        exclude.add_argument("--reason", required=True, help="published with the leaderboard")
        exclude.add_argument("--by", default="manage.py voters", help="who decided")
        restore = actions.add_parser("restore", help="lift an exclusion")
        restore.add_argument("id", type=int, help="the exclusion's number")
        restore.add_argument("--reason", required=True)
        restore.add_argument("--by", default="manage.py voters")

    def handle(self, *args: object, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "screen":
                self._screen(as_json=options["json"])
            elif action == "list":
                self._list()
            elif action == "exclude":
                self._exclude(options)
            else:
                lifted = voter_exclusion_lift(
                    exclusion_id=options["id"], lifted_by=options["by"], reason=options["reason"]
                )
                self.stdout.write(f"Lifted exclusion #{lifted.pk}: its votes count again.")
                self._refit()
        except ExclusionRefused as refused:
            raise CommandError(str(refused)) from None

    def _screen(self, *, as_json: bool) -> None:
        flagged = voter_screening()
        if as_json:
            for f in flagged:
                line = {"kind": f.kind, "key": f.key, "exclusion": f.exclusion_id}
                self.stdout.write(json.dumps(line | f.evidence))
            return
        if not flagged:
            self.stdout.write("No voter is flagged.")
            return
        for f in flagged:
            self.stdout.write(_flag_line(f))
            for signal in f.signals:
                self.stdout.write(f"    {signal.name} ({signal.value:g}): {signal.detail}")

    def _list(self) -> None:
        rows = VoterExclusion.objects.order_by("id")
        if not rows:
            self.stdout.write("No exclusions.")
        for e in rows:
            state = (
                f"lifted {e.lifted_at:%Y-%m-%d %H:%M} by {e.lifted_by}: {e.lift_reason}"
                if e.lifted_at
                else "in force"
            )
            self.stdout.write(
                f"#{e.pk} {e.kind} {e.key[:SHOWN_KEY]} since {e.created_at:%Y-%m-%d %H:%M} "
                f"by {e.excluded_by}: {e.reason} — {state}"
            )

    def _exclude(self, options: dict[str, Any]) -> None:
        kind = options["kind"]
        exclusion, flagged = voter_exclude_on_screening(
            kind=kind, key=options["key"], reason=options["reason"], excluded_by=options["by"]
        )
        self.stdout.write(
            f"Excluded {kind} {exclusion.key[:SHOWN_KEY]} as #{exclusion.pk}"
            f"{'' if flagged else ' (screening had not flagged it)'}. "
            f"Undo with: python manage.py voters restore {exclusion.pk} --reason ..."
        )
        self._refit()

    def _refit(self) -> None:
        snapshot = leaderboard_refresh(holder="voters command")
        if snapshot is not None:
            self.stdout.write(f"The live leaderboard is refitted on {snapshot.n_battles} votes.")
        else:
            self.stdout.write("The live leaderboard picks this up at its next refit.")


def _flag_line(f: FlaggedVoter) -> str:
    status = f"excluded (#{f.exclusion_id})" if f.exclusion_id else "counted"
    return f"{f.kind} {f.key[:SHOWN_KEY]}: {f.votes} votes, {status}"
