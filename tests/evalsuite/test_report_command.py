"""`manage.py evals report`: every score with its standard error, item count and judge."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agents.services import agent_create
from evalsuite.models import EvalRun
from tests.evalsuite.conftest import instruct_below_base_phase
from tests.factories import eval_run, running_phase

pytestmark = pytest.mark.django_db


def report(*args: str) -> str:
    out = StringIO()
    call_command("evals", "report", "--phase", "phase-1", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def phase():
    phase = running_phase()
    judge = "gpt-judge-1 (upstream judge)"
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.2, "strongreject": 0.8}, judge_model=judge)
    eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.6}, stderr=0.02, n=400)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5, "strongreject": 0.7},
             agent=agent_create(name="alice"), label="alice-1", stderr=0.013, n=1319,
             judge_model=judge)  # fmt: skip
    return phase


def test_the_report_shows_score_standard_error_items_and_judge(phase):
    text = report()
    assert "gsm8k" in text and "0.500 ± 0.013  n=1319" in text
    assert "strongreject" in text and "0.700 ± 0.013  n=1319  judge gpt-judge-1" in text
    # gap closed (0.5 − 0.2) / (0.6 − 0.2) = 0.75
    assert "gap closed: median +0.75 ± 0.04" in text
    assert "left out of gap closed: none" in text
    # strongreject 0.7 vs 0.8: −0.1 against 1.96·√(0.013² + 0.01²) = 0.032, measurable
    assert "strongreject -0.100 ± 0.016 MORE HARMFUL" in text


def test_the_json_report_carries_the_same_numbers(phase):
    body = json.loads(report("--json"))
    alice = next(m for m in body["models"] if m["model"] == "alice-1")
    assert alice["scores"]["gsm8k"] == {"score": 0.5, "stderr": 0.013, "n": 1319,
                                        "judge_model": ""}  # fmt: skip
    assert alice["scores"]["strongreject"]["judge_model"] == "gpt-judge-1 (upstream judge)"
    assert alice["headline"]["score"] == 0.75
    # The references' noise counts too: g = (x − b) / (i − b), ∂g/∂x = 1 / 0.4, ∂g/∂b =
    # (x − i) / 0.4² = −0.625, ∂g/∂i = −(x − b) / 0.4² = −1.875, with se 0.013, 0.01, 0.02:
    # √(0.0325² + 0.00625² + 0.0375²) = 0.050 (2,000 draws: within about 5 %)
    assert alice["headline"]["stderr"] == pytest.approx(0.050, rel=0.08)
    assert alice["gap_closed"]["measurable_z"] == 1.96


def test_the_correlations_follow_the_table(phase):
    text = report("--correlations")
    assert "# Correlations" in text and "gpu hours vs gap closed" in text
    assert "The study: WildBench vs rating ρ = +0.95" in text


def test_a_phase_where_instruct_never_beats_base_has_no_headline_and_says_why():
    # The demo's case: the two-sided test counted winogrande's −0.6 gap, and the agent
    # "closed" (0 − 0.6) / (0 − 0.6) = +1.00 ± 0.000 of it.
    instruct_below_base_phase("zed")
    text = report()
    assert "0.000 ± 0.000  n=5" in text and "0.600 ± 0.245  n=5" in text
    assert "+1.00" not in text
    assert "gap closed: no benchmark where instruct beats base" in text
    assert "left out of gap closed: winogrande (instruct not above base: 0.000 vs 0.600)" in text
    zed = next(m for m in json.loads(report("--json"))["models"] if m["model"] == "zed-1")
    assert zed["headline"] is None
    assert zed["gap_closed"]["median"] is None
    assert zed["gap_closed"]["no_median"] == "no benchmark where instruct beats base"
    assert zed["gap_closed"]["excluded_reasons"] == {
        "winogrande": "instruct not above base: 0.000 vs 0.600"
    }
