"""The demo's own verdict: which served model never answered, which evaluation did not finish,
and the one-line reason the demo gives when it did not work."""

from __future__ import annotations

import pytest

from arena.battles.models import Answer, Battle
from arena.phases.demo import (
    AgentChange,
    DemoOutcome,
    agent_change_lines,
    contestants_silent,
    evaluations_unfinished,
)
from arena.phases.models import PhaseContestant
from evalsuite.models import EvalRun
from tests import factories

pytestmark = pytest.mark.django_db


def serve(phase, name):
    contestant = factories.contestant(name)
    PhaseContestant.objects.create(
        phase=phase, contestant=contestant, role=PhaseContestant.Role.REFERENCE,
        checkpoint_path=f"/models/{name}",
    )  # fmt: skip
    return contestant


def test_a_served_model_whose_every_answer_failed_never_answered():
    phase = factories.running_phase()
    talks, fails = serve(phase, "talks"), serve(phase, "fails")
    serve(phase, "idle")
    battle = factories.complete_battle(a=talks, b=fails)
    Battle.objects.filter(pk=battle.pk).update(phase=phase.label)
    Answer.objects.filter(battle=battle, contestant=fails).update(
        error="the model server stopped answering", finish_reason=""
    )
    assert contestants_silent(phase) == ["fails", "idle"]


def test_answers_in_another_phase_do_not_count():
    phase = factories.running_phase()
    talks, other = serve(phase, "talks"), factories.contestant("other")
    factories.complete_battle(a=talks, b=other)  # a battle outside the phase
    assert contestants_silent(phase) == ["talks"]


def test_evaluation_runs_that_did_not_finish_are_named_with_their_error():
    phase = factories.running_phase()
    EvalRun.objects.create(phase=phase, role=EvalRun.Role.BASE, model_label="base", benchmarks=[],
                           state=EvalRun.State.DONE)  # fmt: skip
    EvalRun.objects.create(phase=phase, role=EvalRun.Role.INSTRUCT, model_label="instruct", benchmarks=[],
                           state=EvalRun.State.FAILED, error="the job was cancelled")  # fmt: skip
    EvalRun.objects.create(phase=phase, role=EvalRun.Role.AGENT, model_label="alpha", benchmarks=[],
                           state=EvalRun.State.QUEUED)  # fmt: skip
    assert evaluations_unfinished(phase) == [
        "alpha: queued",
        "instruct: failed (the job was cancelled)",
    ]


def test_the_verdict_gives_the_first_problem_and_counts_the_rest():
    outcome = DemoOutcome()
    assert outcome.check(True, "ref_sft ran phase-1 to the end", "unused")
    assert not outcome.check(False, "unused", "ref_lora nominated nothing for phase-1")
    assert not outcome.check(False, "unused", "ref_dpo has no number in the final table")
    assert outcome.reason() == (
        "the demo did not work: ref_lora nominated nothing for phase-1"
        " (and 1 more problem(s) above)"
    )
    assert outcome.lines() == [
        "  ok    ref_sft ran phase-1 to the end",
        "  FAIL  ref_lora nominated nothing for phase-1",
        "  FAIL  ref_dpo has no number in the final table",
    ]


def test_an_agent_missing_a_phase_has_no_change():
    rows = [
        AgentChange("ref_sft", 1010.0, 1030.0, -5.0, 12.5),
        AgentChange("ref_lora", 990.0, None, -20.0, None),
    ]
    assert rows[0].change == pytest.approx(17.5)
    assert rows[1].change is None
    lines = agent_change_lines(rows)
    assert "(change +17.5)" in lines[1]
    assert "(change n/a)" in lines[2]
