"""`arena-agent journal` through the real API over HTTP: the CLI file run by the system's own
python3 with only the standard library, as in a sandbox, against a live server on the test
database. (tests/agents/test_api_and_cli.py runs it as a provisioned agent's Unix user.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import agents.agent_cli
from agents.journal import journal_add
from agents.services import token_issue
from tests.organizer import builders

pytestmark = pytest.mark.django_db(transaction=True)

CLI = Path(agents.agent_cli.__file__)


@pytest.fixture
def run_cli(live_server, tmp_path):
    # A copy, as provisioning puts one at ~/.arena/bin: run from agents/, the package's own
    # `selectors` module would shadow the standard library's.
    cli = tmp_path / "arena-agent"
    cli.write_bytes(CLI.read_bytes())

    def run(agent, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        token = token_issue(agent=agent, kind="api")
        return subprocess.run(
            ["/usr/bin/python3", str(cli), *args],
            env={"HOME": str(tmp_path), "ARENA_URL": live_server.url, "ARENA_TOKEN": token,
                 "PATH": "/usr/bin:/bin"},
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    return run


def test_an_agent_keeps_its_journal_from_the_command_line(run_cli):
    ann = builders.agent("ann")
    ben = builders.agent("ben")
    journal_add(agent=ben, text="ben's own", kind="decision")

    added = run_cli(ann, "journal", "add", "lr 1e-5 diverges; try 5e-6", "--kind", "result")
    piped = run_cli(ann, "journal", "add", "-", "--json", stdin="line one\nline two\n")

    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("journal entry ") and "(result)" in added.stdout
    assert json.loads(piped.stdout)["text"] == "line one\nline two\n"
    listed = json.loads(run_cli(ann, "journal", "list", "--json").stdout)["entries"]
    assert [(e["kind"], e["text"]) for e in listed] == [
        ("result", "lr 1e-5 diverges; try 5e-6"),
        ("note", "line one\nline two\n"),
    ]  # and nothing of ben's
    table = run_cli(ann, "journal", "list").stdout
    assert "result" in table and "    lr 1e-5 diverges; try 5e-6" in table
    assert "    line two" in table and "ben's own" not in table


def test_a_refused_entry_is_a_clear_error_on_the_command_line(run_cli):
    ann = builders.agent("ann")

    too_long = run_cli(ann, "journal", "add", "x" * 8_001)
    empty = run_cli(ann, "journal", "list")

    assert too_long.returncode == 1
    assert "over the limit of 8,000" in too_long.stderr and "split it" in too_long.stderr
    assert empty.stdout.strip() == "no journal entries"
