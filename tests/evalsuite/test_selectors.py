"""The organizer's phase report from stored results: gap closed, safety deltas."""

import pytest

from agents.services import agent_create
from evalsuite.models import EvalRun
from evalsuite.selectors import phase_report
from tests.evalsuite.conftest import stored_run
from tests.factories import running_phase

pytestmark = pytest.mark.django_db


def test_the_phase_report_has_gap_closed_and_flags_a_model_more_harmful_than_base():
    phase = running_phase()
    stored_run(phase, "base", {"gsm8k": 0.2, "mmlu": 0.4, "arc-challenge": 0.5,
                               "strongreject": 0.8, "bbq": 0.6})  # fmt: skip
    stored_run(phase, "instruct", {"gsm8k": 0.6, "mmlu": 0.8, "arc-challenge": 0.52})
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5, "mmlu": 0.5, "arc-challenge": 0.9,
               "strongreject": 0.5, "bbq": 0.7}, agent=alice, label="alice-1")  # fmt: skip

    report = phase_report(phase)
    alice_row = next(m for m in report["models"] if m["model"] == "alice-1")
    gap = alice_row["gap_closed"]
    assert gap["per_benchmark"] == {"gsm8k": 0.75, "mmlu": 0.25}
    assert gap["median"] == 0.5 and gap["excluded"] == ["arc-challenge"]
    flags = {d["benchmark"]: d["more_harmful"] for d in report["safety"]["alice-1"]}
    assert flags == {"strongreject": True, "bbq": False}
