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


def _checkpoints(phase, scores_and_errors):
    """An agent with one evaluated checkpoint per (gsm8k, humaneval, stderr), oldest first,
    the last one nominated; references base (0.2, 0.2) and instruct (0.6, 0.6)."""
    import datetime as dt

    from django.utils import timezone

    from tests.factories import eval_run
    from tests.organizer import builders

    eval_run(phase, "base", {"gsm8k": 0.2, "humaneval": 0.2})
    eval_run(phase, "instruct", {"gsm8k": 0.6, "humaneval": 0.6})
    agent = builders.agent("alice")
    start = timezone.now() - dt.timedelta(days=1)
    made = []
    for i, (gsm8k, humaneval, stderr) in enumerate(scores_and_errors):
        at = start + dt.timedelta(hours=i)
        job = builders.job(agent, submitted=at)
        checkpoint = builders.checkpoint(agent, job=job, at=at, path=f"ckpt-{i}")
        eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": gsm8k, "humaneval": humaneval},
                 agent=agent, checkpoint=checkpoint, label=f"alice-{i}", stderr=stderr)  # fmt: skip
        made.append(checkpoint)
    builders.nomination(agent, phase=phase, checkpoint=made[-1])
    return agent, made


def test_a_nominated_checkpoint_measurably_below_an_earlier_one_is_warned_about():
    from evalsuite.selectors import post_peak_warnings

    phase = running_phase()
    # headlines (median gap closed over two benchmarks): 0.25, 0.75, 0.5; each benchmark's gap
    # closed has se 0.01 / 0.4 = 0.025, their mean 0.025 / √2, the drop √2 times that: 0.025
    _, made = _checkpoints(phase, [(0.3, 0.3, 0.01), (0.5, 0.5, 0.01), (0.4, 0.4, 0.01)])
    (warning,) = post_peak_warnings(phase)
    assert warning.best == str(made[1].pk) and warning.nominated == str(made[2].pk)
    assert warning.drop == pytest.approx(0.25)
    assert warning.drop_stderr == pytest.approx(0.025, rel=0.1)


def test_a_drop_within_the_noise_is_no_post_peak_warning():
    from evalsuite.selectors import post_peak_warnings

    phase = running_phase()
    # a drop of 0.25 with se 0.08 per score: se of the drop 0.08 / 0.4 = 0.2, and 0.25 < 1.96 · 0.2
    _checkpoints(phase, [(0.5, 0.5, 0.08), (0.4, 0.4, 0.08)])
    assert post_peak_warnings(phase) == []


def test_the_pareto_set_of_an_agents_checkpoints_keeps_the_measurably_undominated():
    from evalsuite.selectors import agent_pareto

    phase = running_phase()
    agent, made = _checkpoints(
        phase, [(0.3, 0.3, 0.01), (0.5, 0.3, 0.01), (0.4, 0.5, 0.01), (0.41, 0.51, 0.01)]
    )
    pareto = agent_pareto(agent)
    # ckpt-0 is dominated by ckpt-1 (math measurably better); ckpt-3 is above ckpt-2 by 0.01,
    # within the noise, so neither dominates the other
    assert pareto["pareto"] == [str(c.pk) for c in made[1:]]
    assert pareto["vectors"][str(made[1].pk)]["math"] == {"score": 0.5, "stderr": 0.01, "n": 100}
