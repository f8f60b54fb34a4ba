"""The daily reports' index carries the study's analyses of each evaluated competition."""

import datetime as dt

import pytest

from arena.phases.reports import reports_write
from evalsuite.models import EvalRun
from tests.factories import agent_with_gpu_hours, eval_run, rating_snapshot, running_phase

pytestmark = pytest.mark.django_db


def test_the_index_shows_each_correlation_with_its_interval_and_model_count(tmp_path):
    phase = running_phase(name="spring")
    eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.6}, label="instruct")
    # GPU-hours 10 < 20 < 30 and ratings in the same order: ρ = +1; gsm8k in reverse: ρ = −1
    for name, hours, gsm8k in (("a", 10, 0.5), ("b", 20, 0.4), ("c", 30, 0.3)):
        agent = agent_with_gpu_hours(name, {"phase-1": hours})
        eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": gsm8k}, agent=agent, label=name)
    rating_snapshot("phase-1", {"a": 950, "b": 1000, "c": 1050, "instruct": 1000})

    reports_write(day=dt.date(2025, 3, 14), out_dir=tmp_path)

    index = (tmp_path / "index.md").read_text()
    assert "## Analyses, spring (Spearman ρ)" in index
    assert "| phase-1 | gpu hours vs rating | +1.00 | [" in index
    assert "| phase-1 | gsm8k vs rating style | -1.00 | [" in index
    assert "phase-1: instruct" in index  # the reference ratings are measured against
    html = (tmp_path / "index.html").read_text()
    assert "Analyses, spring" in html and "<td>gpu hours vs rating</td>" in html
