"""Where the suite's time goes: each test's duration, kept across the runs of one `make test`.

Loaded as a plugin (pyproject's addopts). When ``ARENA_TEST_TIMINGS`` names a file, the process
that reports results (the xdist controller, or a plain run) appends one JSON line per test
there: its id, its folder and its setup + call + teardown seconds. `make test` runs the
parallel group and then the serial group into one such file, and ends with

    python -m tests.support.timing FILE

which prints the slowest 25 tests and the time spent per test folder (the sum of its tests'
durations; the folders' tests overlap in time on several workers).

``tests/durations.json`` keeps each file's seconds from a full run, so that the files that take
longest go to the workers first (``files_longest_first``). Refresh it after a full run with

    python -m tests.support.timing var/test-logs/timings.jsonl --write-durations tests/durations.json

A stale file costs only a less even split, never a wrong result.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

TIMINGS_ENV = "ARENA_TEST_TIMINGS"
SLOWEST = 25

_seconds: dict[str, float] = defaultdict(float)
_outcome: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    files_longest_first(items, durations_read(config.rootpath / "tests" / "durations.json"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(TIMINGS_ENV) and not os.environ.get("PYTEST_XDIST_WORKER"):
        _seconds[report.nodeid] += report.duration
        if report.failed:
            _outcome[report.nodeid] = "failed"
        elif report.skipped and report.nodeid not in _outcome:
            _outcome[report.nodeid] = "skipped"
        elif report.when == "call" and report.nodeid not in _outcome:
            _outcome[report.nodeid] = "passed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(TIMINGS_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not _seconds:
        return
    with open(path, "a", encoding="utf-8") as out:
        for nodeid, seconds in _seconds.items():
            outcome = _outcome.get(nodeid, "failed")
            row = {"test": nodeid, "seconds": round(seconds, 3), "outcome": outcome}
            out.write(json.dumps(row) + "\n")


def folder_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return str(Path(path).parent)


def report(lines: list[str]) -> str:
    seconds: dict[str, float] = {}
    outcomes: dict[str, str] = {}
    for line in lines:
        if line.strip():
            row = json.loads(line)
            seconds[row["test"]] = row["seconds"]
            outcomes[row["test"]] = row["outcome"]
    if not seconds:
        return "[timing] no test durations were recorded"
    out = [f"[timing] the {min(SLOWEST, len(seconds))} slowest tests:"]
    for nodeid, spent in sorted(seconds.items(), key=lambda item: -item[1])[:SLOWEST]:
        out.append(f"{spent:9.1f} s  {nodeid}")
    per_folder: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for nodeid, spent in seconds.items():
        per_folder[folder_of(nodeid)] += spent
        count[folder_of(nodeid)] += 1
    out.append("[timing] time per test folder (sum of its tests' durations):")
    for folder, spent in sorted(per_folder.items(), key=lambda item: -item[1]):
        out.append(f"{spent:9.1f} s  {folder} ({count[folder]} tests)")
    out.append(f"{sum(seconds.values()):9.1f} s  in all ({len(seconds)} tests)")
    counted = {
        kind: list(outcomes.values()).count(kind) for kind in ("passed", "failed", "skipped")
    }
    # Both runs together, in the plain form CI reads.
    out.append(
        f"tests: {counted['passed']} passed, {counted['failed']} failed, "
        f"{counted['skipped']} skipped"
    )
    return "\n".join(out)


def file_durations(lines: list[str]) -> dict[str, float]:
    """Seconds per test file, longest first: the order `make test` hands files to workers."""
    per_file: dict[str, float] = defaultdict(float)
    for line in lines:
        if line.strip():
            row = json.loads(line)
            per_file[row["test"].split("::", 1)[0]] += row["seconds"]
    return {name: round(spent, 1) for name, spent in sorted(per_file.items(), key=lambda i: -i[1])}


def files_longest_first(items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Reorder `items` in place so the files known to take longest come first (files not in
    `durations` follow, as collected); within a file the order stays as written. With one file
    to a worker at a time, the long files then start at once instead of ending the run alone."""
    position = {name: index for index, name in enumerate(durations)}
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            position.get(item.nodeid.split("::", 1)[0], len(position)),
            order[id(item)],
        )
    )


def durations_read(path: Path) -> dict[str, float]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    known = {str(k): float(v) for k, v in loaded.items() if isinstance(v, int | float)}
    return dict(sorted(known.items(), key=lambda item: -item[1]))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if len(arguments) not in (1, 3) or (
        len(arguments) == 3 and arguments[1] != "--write-durations"
    ):
        sys.exit("usage: python -m tests.support.timing TIMINGS_FILE [--write-durations OUT]")
    timings = Path(arguments[0])
    lines = timings.read_text().splitlines() if timings.exists() else []
    if len(arguments) == 3:
        Path(arguments[2]).write_text(json.dumps(file_durations(lines), indent=1) + "\n")
    else:
        print(report(lines))
