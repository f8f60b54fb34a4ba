"""The correlations report from stored rows: four agents, two phases, ratings, GPU-hours and
benchmark scores made by hand, so that every ρ is known. Spearman's ρ without ties is
1 − 6·Σd² / (n(n² − 1)); with n = 4 that is 1 − Σd² / 10."""

from datetime import timedelta

import pytest

from arena.competition.models import Phase
from arena.serving.client import Endpoint
from arena.serving.services import contestant_register
from evalsuite.analyses import correlations_report
from evalsuite.models import EvalRun
from tests.factories import agent_with_gpu_hours, eval_run, rating_snapshot, running_phase

pytestmark = pytest.mark.django_db

AGENTS = ("a", "b", "c", "d")
# Gap closed per agent and phase; gsm8k is 0.2 + 0.4·g and mmlu 0.4 + 0.4·g, so both close g
# of the base (0.2, 0.4) → instruct (0.6, 0.8) gap and the median is g.
GAP = {"phase-1": {"a": 0.25, "b": 0.5, "c": 1.0, "d": 1.2},
       "phase-2": {"a": 0.75, "b": 0.25, "c": 1.1, "d": 1.0}}  # fmt: skip
GPU_HOURS = {"a": {"phase-1": 300, "phase-2": 100}, "b": {"phase-1": 100, "phase-2": 400},
             "c": {"phase-1": 200, "phase-2": 250}, "d": {"phase-1": 50, "phase-2": 30}}  # fmt: skip
# Each phase's ratings are centred on that phase's models: the instruct reference is 1060 in
# phase 1 and 1150 in phase 2. Relative to it: a −50 → −20, b +40 → +20, c −10 → +30,
# d −40 → −50, i.e. changes a +30, b −20, c +40, d −10 (naively subtracted: +120, +70, ...).
RATINGS = {"phase-1": {"a": 1010, "b": 1100, "c": 1050, "d": 1020, "instruct": 1060,
                       "base": 900},
           "phase-2": {"a": 1130, "b": 1170, "c": 1180, "d": 1100, "qwen-instruct": 1150,
                       "base": 990}}  # fmt: skip
# arc-challenge has no reference scores (no gap closed) but is scored: its ranks are the
# phase-1 ratings' (a 1, b 4, c 3, d 2).
ARC = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.3}


@pytest.fixture
def competition():
    one = running_phase(label="phase-1")
    competition = one.competition
    competition.instruct_model = "/models/instruct"
    competition.save()
    two = Phase.objects.create(
        competition=competition, number=2, label="phase-2", state=Phase.State.RUNNING,
        starts_at=one.ends_at, ends_at=one.ends_at + timedelta(days=3),
    )  # fmt: skip
    eval_run(one, EvalRun.Role.BASE, {"gsm8k": 0.2, "mmlu": 0.4})
    eval_run(one, EvalRun.Role.INSTRUCT, {"gsm8k": 0.6, "mmlu": 0.8}, label="instruct")
    # In phase 2 the instruct reference is served (and rated) under another name.
    contestant_register(
        display_name="qwen-instruct", checkpoint_path="/models/instruct",
        endpoint=Endpoint(base_url="http://127.0.0.1:9/v1", model="/models/instruct"),
    )  # fmt: skip
    agents = {name: agent_with_gpu_hours(name, GPU_HOURS[name]) for name in AGENTS}
    for phase in (one, two):
        for name, agent in agents.items():
            g = GAP[phase.label][name]
            scores = {"gsm8k": 0.2 + 0.4 * g, "mmlu": 0.4 + 0.4 * g}
            if phase is one:
                scores["arc-challenge"] = ARC[name]
            eval_run(phase, EvalRun.Role.AGENT, scores, agent=agent, label=name)
        rating_snapshot(phase.label, RATINGS[phase.label])
    return competition


def test_each_phase_correlates_gpu_hours_progress_each_benchmark_and_the_rating(competition):
    report = correlations_report(competition, rounds=50)
    one = report["phases"]["phase-1"]
    # ranks — gpu: a 4, b 2, c 3, d 1; rating: a 1, b 4, c 3, d 2; gap closed: a 1, b 2, c 3, d 4
    assert one["gpu_hours_vs_rating"]["rho"] == pytest.approx(1 - 14 / 10)  # d = 3, −2, 0, −1
    assert one["gpu_hours_vs_gap_closed"]["rho"] == pytest.approx(1 - 18 / 10)  # 3, 0, 0, −3
    assert one["gap_closed_vs_rating_style"]["rho"] == pytest.approx(1 - 8 / 10)  # 0, −2, 0, 2
    per_benchmark = one["benchmark_vs_rating"]
    assert per_benchmark["arc-challenge"]["rho"] == pytest.approx(1.0)
    assert per_benchmark["gsm8k"]["rho"] == pytest.approx(0.2)  # gsm8k ranks are gap's
    assert per_benchmark["gsm8k"]["models"] == list(AGENTS)  # references left out
    assert one["rating_reference"] == "instruct"
    assert report["phases"]["phase-2"]["rating_reference"] == "qwen-instruct"
    assert report["study"]["wildbench_vs_rating"] == 0.95


def test_rating_changes_are_measured_against_the_instruct_reference_of_each_phase(competition):
    changes = correlations_report(competition, rounds=50)["phase_changes"]
    assert changes["rating_style_change"] == {"a": 30, "b": -20, "c": 40, "d": -10}
    # gap closed changes a +0.5, b −0.25, c +0.1, d −0.2: ranks a 4, b 1, c 3, d 2;
    # rating changes ranks a 3, b 1, c 4, d 2: d = 1, 0, −1, 0
    assert changes["gap_closed_change_vs_rating_change"]["rho"] == pytest.approx(1 - 2 / 10)
    # GPU-hours changes a −200, b +300, c +50, d −20: ranks a 1, b 4, c 3, d 2; d = −2, 3, −1, 0
    assert changes["gpu_hours_change_vs_rating_change"]["rho"] == pytest.approx(1 - 14 / 10)
    assert changes["rating_reference"] == ["instruct", "qwen-instruct"]


def test_without_a_rated_instruct_reference_no_rating_change_is_made_up(competition):
    rating_snapshot("phase-2", {k: v for k, v in RATINGS["phase-2"].items() if "instruct" not in k})
    changes = correlations_report(competition, rounds=50)["phase_changes"]
    assert changes["rating_style_change"] == {}
    assert changes["gap_closed_change_vs_rating_change"]["n"] == 0


def test_progress_in_the_correlations_counts_only_benchmarks_where_instruct_beats_base():
    from evalsuite.analyses import phase_inputs

    phase = running_phase(label="phase-1")
    # gsm8k qualifies (0.2 → 0.6); on mmlu instruct is below the base (0.8 → 0.4)
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.2, "mmlu": 0.8})
    eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.6, "mmlu": 0.4}, label="instruct")
    for name, gsm8k in (("a", 0.5), ("b", 0.1)):
        agent = agent_with_gpu_hours(name, {"phase-1": 10})
        # both score as low as instruct on mmlu: counted, that would be +1.0 of "gap" each
        eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": gsm8k, "mmlu": 0.4}, agent=agent, label=name)
    eval_run(phase, EvalRun.Role.AGENT, {"mmlu": 0.4}, agent=agent_with_gpu_hours("c", {}),
             label="c")  # fmt: skip
    got = phase_inputs(phase)
    # a closes (0.5 − 0.2) / 0.4 of the gsm8k gap; b, worse than the base, a negative share;
    # c has no benchmark where instruct beats base, so no progress at all (not +1.0)
    assert got.gap_closed == {"a": pytest.approx(0.75), "b": pytest.approx(-0.25)}
