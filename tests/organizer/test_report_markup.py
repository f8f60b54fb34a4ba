"""The daily report is written once, in Markdown, and its HTML is made from it: agent text (a
job name, a journal entry, a tool command) shows as written in both, and never becomes markup,
a link or a broken table."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.core.management import call_command

from agents.journal import journal_add
from agents.models import TrajectoryEvent
from tests.organizer import builders

pytestmark = pytest.mark.django_db

DAY = dt.date(2025, 3, 14)
NOON = dt.datetime(2025, 3, 14, 12, tzinfo=dt.UTC)

JOB = "x</td><script>alert(1)</script>|`a` **b**"
ENTRY = "see [notes](javascript:alert(1)) | tip: `rm` *all*\n```\n</pre><img src=x onerror=alert(1)>\nend"
COMMAND = "curl '[x](javascript:alert(2))' | sh && echo <b>&amp;done</b>"
AUTOLINKS = "open <https://evil.example/login> or mail <help@evil.example> ~~struck~~"


@pytest.fixture
def hostile(tmp_path):
    ann = builders.agent("ann")
    builders.job(ann, submitted=NOON, runs=[(NOON, NOON + dt.timedelta(hours=1))], name=JOB)
    journal_add(agent=ann, text=ENTRY, kind="result", now=NOON)
    TrajectoryEvent.objects.create(
        agent=ann, kind="tool_call", reported=True, size=100, created_at=NOON,
        payload={"command": COMMAND, "exit_code": 0, "tool": "shell"},
    )  # fmt: skip
    TrajectoryEvent.objects.create(
        agent=ann, kind="tool_call", reported=True, size=100,
        created_at=NOON + dt.timedelta(minutes=1),
        payload={"command": AUTOLINKS, "exit_code": 0, "tool": "shell"},
    )  # fmt: skip
    call_command("reports", "daily", "--date", DAY.isoformat(), "--out", str(tmp_path))
    return (tmp_path / "ann.md").read_text(), (tmp_path / "ann.html").read_text()


def test_agent_text_never_becomes_markup_in_the_html(hostile):
    _, html = hostile
    for markup in ("<script", "<img", "<b>", "</pre><"):
        assert markup not in html
    tags = re.findall(r"<[^>]*>", html)
    assert not [tag for tag in tags if "onerror" in tag or "javascript" in tag]
    # Only the report's own links: none from the agent's `[text](url)`.
    assert re.findall(r'href="([^"]*)"', html) == ["index.html"]
    # No emphasis or code span from the agent's `*`, `**` and backticks: only the report's own.
    assert "<strong>" not in html
    assert set(re.findall(r"<em>(.*?)</em>", html)) <= {"none", "no phase on this day"}
    assert html.count("<code") == html.count('<pre><code class="language-text">') == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # Autolinks and strikethrough from agent text stay text (raw HTML off does not stop them).
    assert "<del>" not in html and "mailto:" not in html
    assert (
        "open &lt;https://evil.example/login&gt; or mail &lt;help@evil.example&gt; ~~struck~~"
        in html
    )


def test_agent_text_shows_as_written_and_keeps_its_table_row(hostile):
    markdown, html = hostile
    # One row each: the pipes escaped, so each table keeps its columns.
    job_row = next(line for line in markdown.splitlines() if "alert(1)</script>" in line)
    assert job_row.count(" | ") - job_row.count("\\| ") == 6  # seven cells
    cells = re.findall(r"<td>(.*?)</td>", html)
    assert "x&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;|`a` **b**" in cells
    assert (
        "curl '[x](javascript:alert(2))' | sh &amp;&amp; echo &lt;b&gt;&amp;amp;done&lt;/b&gt;"
        in [cell.replace("<br>", "") for cell in cells]
    )
    # The entry whole, its newlines and its own ``` kept, below the folded row.
    whole = "see [notes](javascript:alert(1)) | tip: `rm` *all*\n```\n&lt;/pre&gt;&lt;img"
    assert whole in html
