"""`manage.py evals fetch|run|collect|report` — download the pinned data sets, queue
evaluation jobs, store finished ones, print the organizer's report (JSON)."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.competition.models import Phase
from arena.serving.models import Contestant
from evalsuite.analyses import correlations_report
from evalsuite.models import EvalRun
from evalsuite.registry import benchmarks, data_fetch, missing_data
from evalsuite.report_text import correlation_lines, phase_lines
from evalsuite.selectors import phase_report
from evalsuite.services import (
    JUDGE_UPSTREAM,
    evaluations_collect,
    evaluations_queue,
    fortress_judges_missing,
)


class Command(BaseCommand):
    help = "Run the benchmark suite as cluster jobs, collect results, report."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="queue one job per contestant (and batch)")
        run.add_argument("--phase", required=True, help="phase label, e.g. phase-1")
        run.add_argument("--contestant", action="append", default=[],
                         help="display name (repeatable); default: every active contestant")  # fmt: skip
        run.add_argument("--benchmark", action="append", default=[], help="default: all 20")
        run.add_argument("--batch-size", type=int, default=None)
        run.add_argument("--judge", default=JUDGE_UPSTREAM, help="the proxy upstream to judge with")
        fetch = sub.add_parser("fetch", help="download the pinned data sets into the hub cache")
        fetch.add_argument("--benchmark", action="append", default=[], help="default: all")
        collect = sub.add_parser("collect", help="store the results of finished jobs")
        collect.add_argument("--wait", type=float, default=0,
                             help="keep collecting up to this many seconds until none is queued")  # fmt: skip
        report = sub.add_parser("report", help="benchmark table, gap closed, safety, warnings")
        report.add_argument("--phase", required=True)
        report.add_argument("--correlations", action="store_true",
                            help="add the competition's correlations report")  # fmt: skip
        report.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['action']}")(options)

    def _phase(self, label: str) -> Phase:
        phase = Phase.objects.filter(label=label).order_by("-competition__created_at").first()
        if phase is None:
            raise CommandError(f"no phase labelled {label!r}")
        return phase

    def _run(self, options: dict[str, Any]) -> None:
        # A benchmark whose set is not in the hub cache is refused before anything is queued;
        # the others run.
        try:
            names = options["benchmark"] or [entry.name for entry in benchmarks()]
            missing = missing_data(names)
        except KeyError as unknown:
            raise CommandError(str(unknown)) from None
        refused = {error.benchmark for error in missing}
        names = [name for name in names if name not in refused]
        if not names:
            raise CommandError("\n".join(str(error) for error in missing))
        for error in missing:
            self.stderr.write(f"not run: {error}")
        if "fortress" in names:
            absent = fortress_judges_missing()
            if absent:
                self.stderr.write(
                    f"FORTRESS judge upstreams {', '.join(absent)} (EVALS_FORTRESS_JUDGES) are "
                    "not active proxy upstreams: its items will fail and it will be unscored"
                )
        phase = self._phase(options["phase"])
        contestants = Contestant.objects.filter(active=True)
        if options["contestant"]:
            contestants = Contestant.objects.filter(display_name__in=options["contestant"])
            missing = set(options["contestant"]) - {c.display_name for c in contestants}  # type: ignore[assignment]  # `missing` is a list of datasets above
            if missing:
                raise CommandError(f"no contestant named {', '.join(sorted(missing))}")  # type: ignore[arg-type]  # a set of names here (line 67)
        try:
            runs = evaluations_queue(
                phase=phase,
                contestants=list(contestants),
                benchmark_names=names,
                batch_size=options["batch_size"],
                judge_upstream=options["judge"],
            )
        except KeyError as unknown:
            raise CommandError(str(unknown)) from None
        for run in runs:
            where = f"job {run.job.scheduler_id}" if run.job else run.error
            self.stdout.write(f"run {run.pk} {run.model_label} ({run.role}): {where}")

    def _fetch(self, options: dict[str, Any]) -> None:
        # Every set is tried, whatever became of the others; the table says which failed, why.
        try:
            fetched = list(data_fetch(names=options["benchmark"] or None))
        except KeyError as unknown:
            raise CommandError(str(unknown)) from None
        width = max(len(row.benchmark) for row in fetched)
        lines = [f"{'benchmark':<{width}}  {'status':<18}  data set and detail"]
        for row in fetched:
            status = "fetched" if not row.reason else f"FAILED ({row.reason})"
            lines.append(f"{row.benchmark:<{width}}  {status:<18}  {row.label}: {row.detail}")
        self.stdout.write("\n".join(lines))
        failed = [row for row in fetched if row.reason]
        if failed:
            raise CommandError(
                f"{len(failed)} of {len(fetched)} sets not fetched: "
                + ", ".join(f"{row.benchmark} ({row.reason})" for row in failed)
            )

    def _collect(self, options: dict[str, Any]) -> None:
        deadline = time.monotonic() + options["wait"]
        while True:
            for run in evaluations_collect():
                self.stdout.write(f"run {run.pk} {run.model_label}: {run.state} {run.error}")
            queued = EvalRun.objects.filter(state=EvalRun.State.QUEUED).count()
            if not queued or time.monotonic() >= deadline:
                self.stdout.write(f"{queued} still queued")
                return
            time.sleep(5)

    def _report(self, options: dict[str, Any]) -> None:
        phase = self._phase(options["phase"])
        report = phase_report(phase)
        if options["correlations"]:
            report["correlations"] = correlations_report(phase.competition)
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, default=str))
            return
        lines = phase_lines(report)
        if options["correlations"]:
            lines += correlation_lines(report["correlations"])
        self.stdout.write("\n".join(lines))
