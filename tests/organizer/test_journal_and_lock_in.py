"""What organizers see of how agents work: the lock-in selector over real job and data rows,
the dashboard's journal and lock-in sections (agent text escaped), and the daily report's."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents.journal import journal_add
from agents.models import JournalEntry
from agents.strategy_selectors import phase_lock_in
from arena.competition.models import Competition, Phase
from cluster.models import Job
from frontend.organizer_journal import journal_sections, lock_in_sections
from tests.organizer import builders

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
START = NOW - dt.timedelta(days=5)  # a ten-day phase, half run
END = NOW + dt.timedelta(days=5)


def day(n: float) -> dt.datetime:
    return START + dt.timedelta(days=n)


@pytest.fixture
def phase():
    competition = Competition.objects.create(name="c", base_model="/models/base")
    return Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.RUNNING,
        starts_at=START, ends_at=END,
    )  # fmt: skip


@pytest.fixture
def ann(phase):
    """ann, worked out by hand: four new approaches by day 2 (sft at 1e-5, two data sources
    on day 0.5, DPO+LoRA at 1e-7 on day 2), then only repeats; six attempts in all."""
    ann = builders.agent("ann")
    builders.job(ann, submitted=day(0), name="sft", script="train.py --lr 2e-5")
    builders.data_record(
        ann, at=day(0.5), sources=["HuggingFaceH4/ultrachat_200k", "generated:tiny-chats"]
    )
    builders.job(ann, submitted=day(1), name="eval", script="python eval.py out/ckpt-1")
    builders.job(ann, submitted=day(2), name="pref", script="dpo.py --lora_r 8 --learning_rate 5e-7")  # fmt: skip
    builders.job(ann, submitted=day(3), name="sft-again", script="sft.py --lr 3e-5")
    builders.data_record(
        ann, at=day(4), sources=["https://huggingface.co/datasets/HuggingFaceH4/ultrachat_200k"]
    )
    # Not this phase's: data from before it began, a job booked to another period.
    builders.data_record(ann, at=day(-1), sources=["before-the-phase"])
    old = builders.job(ann, submitted=day(3), name="grpo", script="grpo.py --lr 1e-6")
    Job.objects.filter(pk=old.pk).update(period="phase-0")
    # Not ann's.
    ben = builders.agent("ben")
    builders.job(ben, submitted=day(4), name="orpo", script="orpo.py")
    return ann


def test_the_selector_feeds_the_phases_jobs_and_data_of_that_agent_only(ann, phase):
    line = phase_lock_in(ann, phase)

    assert line.measure.approach_names == (
        "sft lr~1e-5",
        "data:huggingfaceh4/ultrachat_200k",
        "data:generated:tiny-chats",
        "dpo+lora lr~1e-7",
    )
    assert line.measure.attempts == 6  # three training jobs, three data sources
    assert line.measure.locked_in_at == day(2)
    assert line.measure.share_elapsed == pytest.approx(0.2)


def test_the_measure_as_of_an_earlier_time_sees_only_what_came_before(ann, phase):
    line = phase_lock_in(ann, phase, until=day(1.5))

    assert line.measure.approaches == 3 and line.measure.attempts == 3
    assert line.measure.locked_in_at == day(0.5)
    assert line.measure.share_elapsed == pytest.approx(0.05)


def test_the_dashboard_shows_journals_escaped_and_the_lock_in(ann, settings, tmp_path):
    settings.CLUSTER_BACKEND = "local"
    settings.VAR_DIR = tmp_path / "var"
    journal_add(agent=ann, text="<script>alert('journal')</script> DPO next", kind="decision")
    staff = Client()
    staff.force_login(User.objects.create_user("org", password="x", is_staff=True))

    page = staff.get("/organizer/agents/").content.decode()

    assert "Agents&#x27; experiment journals: latest entries" in page
    assert "&lt;script&gt;alert(&#x27;journal&#x27;)&lt;/script&gt; DPO next" in page
    assert "<script>alert('journal')" not in page
    assert "Strategy lock-in per agent and phase" in page
    [row] = [r for r in lock_in_sections()[0].rows if r[0] == "ann"]
    assert row[:6] == ["ann", "phase-1", "4", "6", f"{day(2):%Y-%m-%d %H:%M}", "20%"]


def test_the_journal_section_shows_each_agents_latest_entries_newest_first(ann):
    for n in range(7):
        journal_add(agent=ann, text=f"entry {n}", now=NOW + dt.timedelta(minutes=n))
    journal_add(agent=ann, text="y" * 1000, now=NOW + dt.timedelta(minutes=8))

    [section] = journal_sections()

    assert [row[4] for row in section.rows] == [
        "y" * 399 + "…",
        "entry 6",
        "entry 5",
        "entry 4",
        "entry 3",
    ]


def test_no_section_before_anyone_writes_or_trains(phase):
    builders.agent("idle")
    assert journal_sections() == [] and lock_in_sections() == []


def test_the_daily_report_has_the_days_entries_and_the_lock_in(ann, tmp_path):
    report_day = day(2).date()
    noon = dt.datetime.combine(report_day, dt.time(12), tzinfo=timezone.get_current_timezone())
    journal_add(agent=ann, text="H: DPO | LoRA\nwill beat SFT", kind="hypothesis", now=noon)
    journal_add(agent=ann, text="<b>yesterday</b>", now=noon - dt.timedelta(days=1))
    assert JournalEntry.objects.count() == 2

    call_command("reports", "daily", "--date", report_day.isoformat(), "--out", str(tmp_path))

    markdown = (tmp_path / "ann.md").read_text()
    assert "| 12:00 | hypothesis | H: DPO \\| LoRA will beat SFT |" in markdown
    assert "yesterday" not in markdown
    # As of the end of that day: everything up to day 2 is in.
    assert "- phase-1: 4 distinct approaches in" in markdown
    assert "of the phase elapsed" in markdown
    html = (tmp_path / "ann.html").read_text()
    assert "H: DPO | LoRA\nwill beat SFT" in html
    assert "distinct approaches" in html
    assert "- phase-1: no approach tried yet" in (tmp_path / "ben.md").read_text()  # orpo: day 4
    # The index counts the day's entries and the approaches so far.
    assert "| 1 | 4 | [ann](ann.md) |" in (tmp_path / "index.md").read_text()
    assert "<td>1</td><td>4</td>" in (tmp_path / "index.html").read_text()
