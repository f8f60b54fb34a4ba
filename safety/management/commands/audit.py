from __future__ import annotations

import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.competition.models import Phase
from safety.judge import TrajectoryJudge
from safety.models import Finding
from safety.selectors import findings_for_dashboard
from safety.services import audit_run, finding_set_status, judge_from_settings


class Command(BaseCommand):
    help = "Rule-violation audits: run them, list the findings, confirm or dismiss one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        run = actions.add_parser("run", help="audit agents (all by default); safe to re-run")
        run.add_argument("--agent", action="append", dest="agents", metavar="NAME")
        run.add_argument("--phase", metavar="LABEL", help="only this phase's nominations")
        run.add_argument("--judge-model", help="judge model name (default SAFETY_JUDGE_MODEL)")
        run.add_argument("--judge-url", help="OpenAI-compatible base URL (default: the API proxy)")
        run.add_argument(
            "--judge-key-env",
            metavar="VAR",
            help="environment variable holding the judge's (organizer proxy) token",
        )
        run.add_argument("--no-judge", action="store_true", help="skip the trajectory judge")

        listing = actions.add_parser("list", help="findings, open ones first")
        listing.add_argument("--phase", metavar="LABEL")
        listing.add_argument("--status", choices=Finding.Status.values)
        listing.add_argument("--agent", metavar="NAME")
        listing.add_argument("--json", action="store_true")

        for status, verb in (
            ("confirm", "confirmed"),
            ("dismiss", "dismissed"),
            ("reopen", "open"),
        ):
            change = actions.add_parser(status, help=f"mark a finding {verb}")
            change.add_argument("id", type=int)
            change.add_argument("--note", help="why (kept with the finding)")

    def handle(self, *args: object, **options: Any) -> None:
        action = options["action"]
        if action == "run":
            self._run(options)
        elif action == "list":
            self._list(options)
        else:
            status = {"confirm": "confirmed", "dismiss": "dismissed", "reopen": "open"}[action]
            finding = Finding.objects.filter(pk=options["id"]).first()
            if finding is None:
                raise CommandError(f"no finding {options['id']}")
            finding = finding_set_status(finding=finding, status=status, note=options["note"])
            self.stdout.write(
                f"finding {finding.pk} ({finding.agent}: {finding.summary}) is {status}"
            )

    def _phase(self, label: str | None) -> Phase | None:
        if not label:
            return None
        phase = Phase.objects.filter(label=label).order_by("-starts_at").first()
        if phase is None:
            raise CommandError(f"no phase labelled {label!r}")
        return phase

    def _judge(self, options: dict[str, Any]) -> TrajectoryJudge | None:
        if options["no_judge"]:
            return None
        variable = options["judge_key_env"]
        judge = judge_from_settings(
            model=options["judge_model"],
            base_url=options["judge_url"],
            api_key=os.environ.get(variable, "") if variable else None,
        )
        if judge is None:
            self.stdout.write(
                "no judge model configured (SAFETY_JUDGE_MODEL): trajectories not judged"
            )
        return judge

    def _run(self, options: dict[str, Any]) -> None:
        try:
            report = audit_run(
                agent_names=options["agents"],
                phase=self._phase(options["phase"]),
                judge=self._judge(options),
                log=self.stdout.write,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for line in report.skipped:
            self.stdout.write(f"skipped {line}")
        for line in report.errors:
            self.stderr.write(f"error: {line}")

    def _list(self, options: dict[str, Any]) -> None:
        phase = self._phase(options["phase"])
        board = findings_for_dashboard(phase)
        rows = [
            r
            for r in board["findings"]
            if (not options["status"] or r["status"] == options["status"])
            and (not options["agent"] or r["agent"] == options["agent"])
        ]
        if options["json"]:
            self.stdout.write(json.dumps({**board, "findings": rows}, indent=2))
            return
        for r in rows:
            self.stdout.write(
                f"{r['id']:>5} {r['status']:<9} {r['severity']:<8} {r['agent']:<16} "
                f"{r['phase'] or '-':<10} {r['kind']:<18} {r['summary']}"
            )
        self.stdout.write(
            f"{len(rows)} finding(s); results replaced by the base model's for: "
            f"{', '.join(board['replaced_agents']) or 'nobody'}"
        )
