"""`manage.py demo` on a stand-in competition, for the tests of how the demo stops.

    python -m tests.frontend.demo_stand_in pass|fail|hang [demo options]

The real command runs: its fresh database, its site (daphne), its verdict, its serving until
stopped, its signal handling, its stopping and its exit status. Only what takes the real demo
many minutes is replaced: what it prepares (the tiny models, the agents' training environment,
the firewall, the shared base model) and the competition itself (agents, both phases, serving,
the crowd, benchmarks, audits), which here records its checks at once (`pass`: CHECKS that
worked, as many as the real demo's; `fail`: one of them failed) or never ends (`hang`, for a
demo stopped before its verdict).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import django

CHECKS = 26  # as many as the real demo records
FAILED_CHECK = "the stand-in's last check failed"
UNDER_WAY = "the stand-in competition is under way"


def main() -> None:
    mode, *options = sys.argv[1:]
    if mode not in {"pass", "fail", "hang"}:
        raise SystemExit(f"usage: {__doc__}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
    django.setup()
    from django.core.management import execute_from_command_line

    from frontend.management.commands import demo

    def prerequisites(self: demo.Command, clock: object) -> tuple[Path, Path]:
        return Path("/nonexistent/base"), Path("/nonexistent/instruct")

    def competition(self: demo.Command, started: object, outcome: demo.DemoOutcome,
                    *args: object, **kwargs: object) -> None:  # fmt: skip
        self._say(UNDER_WAY)
        while mode == "hang":
            time.sleep(1.0)
        for number in range(CHECKS):
            failed = mode == "fail" and number == CHECKS - 1
            outcome.check(not failed, f"stand-in check {number + 1}", FAILED_CHECK)

    for seam in ("_prerequisites", "_competition"):
        if not hasattr(demo.Command, seam):
            raise SystemExit(f"the demo command has no {seam} to stand in for")
    demo.Command._prerequisites = prerequisites  # type: ignore[method-assign,assignment]
    demo.Command._competition = competition  # type: ignore[method-assign,assignment]
    execute_from_command_line(["manage.py", "demo", *options])


if __name__ == "__main__":
    main()
