from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from cluster.selectors import account_usage
from cluster.services import GIB, cluster_sync, storage_measure_all


class Command(BaseCommand):
    help = (
        "The cluster: sync the scheduler's accounting into jobs and the GPU ledger; show usage;"
        " measure the agents' sandboxes against their storage quota."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        sync = actions.add_parser("sync", help="pull accounting (idempotent); --every to repeat")
        sync.add_argument("--every", type=int, metavar="SECONDS", help="repeat forever, this often")
        actions.add_parser(
            "usage", help="GPU-hours per account: the platform's ledger and the scheduler's"
        )
        actions.add_parser(
            "storage",
            help="measure every open agent account's sandbox; block submissions over the quota",
        )

    def handle(self, *args: object, **options: Any) -> None:
        if options["action"] == "usage":
            self._usage()
            return
        if options["action"] == "storage":
            self._storage()
            return
        every = options.get("every")
        while True:
            report = cluster_sync()
            self.stdout.write(
                f"synced {report.jobs_seen} jobs ({report.jobs_new} new), charged {report.segments_charged} "
                f"runs, {report.gpu_seconds_charged / 3600:.3f} GPU-h"
            )
            if not every:
                return
            time.sleep(max(every, 1))

    def _usage(self) -> None:
        self.stdout.write(
            f"{'account':<24} {'platform GPU-h':>15} {'scheduler GPU-h':>16} {'limit':>8}  backend={settings.CLUSTER_BACKEND}"
        )
        for usage in account_usage():
            scheduler = (
                "?" if usage.scheduler_gpu_hours is None else f"{usage.scheduler_gpu_hours:.3f}"
            )
            self.stdout.write(
                f"{usage.account:<24} {usage.platform_gpu_hours:>15.3f} {scheduler:>16} {usage.limit_gpu_hours:>8.0f}"
            )

    def _storage(self) -> None:
        lines = storage_measure_all()
        for line in lines:
            status = f"blocked: {line.blocked_reason}" if line.blocked_reason else "ok"
            self.stdout.write(
                f"{line.account:<24} {line.bytes_used / GIB:>9.2f} of {line.limit_gib} GiB  {status}"
            )
        if not lines:
            self.stdout.write("no open account has a sandbox to measure")
