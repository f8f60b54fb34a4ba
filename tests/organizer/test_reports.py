"""`manage.py reports daily`: one HTML and one Markdown file per agent with that day's numbers."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import CommandError, call_command

from arena.phases.reports import agent_day
from tests import factories
from tests.organizer import builders

pytestmark = pytest.mark.django_db

DAY = dt.date(2025, 3, 14)


def at(hour: int, minute: int = 0, *, day: dt.date = DAY) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)


@pytest.fixture
def busy_day():
    """ann: two jobs and a run from the day before, $3.50 of API calls, data, a checkpoint
    and a nomination on DAY; ben did nothing."""
    ann = builders.agent("ann", gpu_hours=100, credit=300)
    builders.agent("ben")
    before = DAY - dt.timedelta(days=1)
    builders.job(ann, submitted=at(20, day=before), runs=[(at(22, day=before), at(23, day=before))], gpus=4)  # fmt: skip
    # Runs from 23:00 the day before to 01:00: one of its two hours falls on DAY.
    builders.job(ann, submitted=at(22, day=before), runs=[(at(23, day=before), at(1))], gpus=2)
    sft = builders.job(ann, submitted=at(9), runs=[(at(9), at(12))], gpus=8, name="sft-big")
    builders.job(ann, submitted=at(15), state="PENDING", name="dpo")
    builders.proxy_call(ann, at=at(10), cost="1.25", tokens=2000)
    builders.proxy_call(ann, at=at(18), cost="2.25", tokens=1000)
    builders.proxy_call(ann, at=at(10, day=before), cost="5.00")
    builders.proxy_call(ann, at=at(10, day=DAY + dt.timedelta(days=1)), cost="7.00")
    builders.data_record(ann, at=at(8), path="data/chats|v2.jsonl")
    ckpt = builders.checkpoint(ann, job=sft, at=at(12, 30))
    phase = factories.running_phase()
    builders.nomination(ann, phase=phase, checkpoint=ckpt, at=at(13))
    return ann


def test_a_days_numbers_are_that_days(busy_day):
    report = agent_day(busy_day, DAY)

    assert [j.name for j in report.jobs] == ["sft", "sft-big", "dpo"]
    assert report.gpu_hours_day == pytest.approx(2 * 1 + 8 * 3)
    assert report.gpu_hours_used == pytest.approx(4 * 1 + 2 * 2 + 8 * 3)  # everything by midnight
    assert report.gpu_hours_left == pytest.approx(100 - 32)
    assert report.api_calls == 2 and report.api_tokens == 3000
    assert str(report.api_spend_day) == "3.500000"
    assert float(report.api_spent_total) == 8.5  # not the call on the day after
    assert float(report.api_credit_left) == 291.5
    assert [d.path for d in report.data] == ["data/chats|v2.jsonl"]
    assert [c.path for c in report.checkpoints] == ["ckpt-1"]
    assert [(n.phase, n.training_method) for n in report.nominations] == [("phase-1", "full SFT")]


def test_the_command_writes_both_files_per_agent_and_an_index(busy_day, tmp_path, capsys):
    call_command("reports", "daily", "--date", "2025-03-14", "--out", str(tmp_path))

    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ann.html", "ann.md", "ben.html", "ben.md", "index.html", "index.md"]
    markdown = (tmp_path / "ann.md").read_text()
    assert "# ann — 2025-03-14" in markdown
    assert "GPU-hours this day: 26.00" in markdown
    assert "32.00 of 100.00; left 68.00" in markdown
    assert "spend this day: $3.50" in markdown
    assert "| sft-big | COMPLETED | normal | 8 | 24.00 | 24.00 |" in markdown
    assert "data/chats\\|v2.jsonl" in markdown  # a pipe cannot break the table
    assert "| phase-1 | ckpt-1 | full SFT | 1.5 |" in markdown
    html = (tmp_path / "ann.html").read_text()
    assert "<td>sft-big</td>" in html and "$3.50" in html and "26.00" in html
    assert "_none_" in (tmp_path / "ben.md").read_text()
    assert "ann.html" in (tmp_path / "index.html").read_text()
    out = capsys.readouterr().out
    assert "[1/2] ann: 3 jobs, 26.00 GPU-h, $3.50 API" in out and "wrote 6 files" in out


def test_agent_text_is_escaped_in_the_html_report(tmp_path):
    ann = builders.agent("ann")
    builders.data_record(ann, at=at(8), path="<script>alert(1)</script>.jsonl")

    call_command("reports", "daily", "--date", "2025-03-14", "--out", str(tmp_path))

    html = (tmp_path / "ann.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html


def test_the_default_folder_is_under_var_reports(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    builders.agent("ann")
    call_command("reports", "daily", "--date", "2025-03-14")
    assert (tmp_path / "reports" / "2025-03-14" / "ann.md").exists()


@pytest.mark.parametrize("bad", ["2025-13-01", "yesterday", "14/03/2025"])
def test_a_bad_date_is_a_clear_error(bad):
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("reports", "daily", "--date", bad)
