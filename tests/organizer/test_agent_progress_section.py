"""The dashboard's sections on agents' own evaluations: each agent's Pareto set over its
evaluated checkpoints and its post-peak warning, held-out benchmarks included; and the
agents' on-demand runs with their state."""

import pytest

from agents.models import Nomination
from cluster.models import Job
from evalsuite.models import EvalRun
from frontend.organizer import provided_sections
from frontend.organizer_agent_evals import agent_progress_sections, on_demand_run_sections
from tests.evalsuite.on_demand_builders import checkpoint_of, provisioned
from tests.factories import eval_run, running_phase

pytestmark = pytest.mark.django_db


def test_each_agent_has_a_row_with_its_pareto_set_and_post_peak_warning(tmp_path):
    phase = running_phase()
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.1, "math": 0.1}, n=100)
    eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.9, "math": 0.9}, n=100)
    alice, account = provisioned("alice", tmp_path)
    early, late = checkpoint_of(alice, account, 1), checkpoint_of(alice, account, 2)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.7, "math": 0.7}, agent=alice, checkpoint=early)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.3, "math": 0.3}, agent=alice, checkpoint=late)
    Nomination.objects.create(
        agent=alice, phase=phase, checkpoint=late, model_card="", card_fields={}
    )
    bob, bob_account = provisioned("bob", tmp_path)
    only = checkpoint_of(bob, bob_account, 3)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5}, agent=bob, checkpoint=only)

    (section,) = agent_progress_sections()
    alice_row, bob_row = section.rows
    assert alice_row[:4] == ["alice", "2", str(early.pk), f"{late.pk} (nominated)"]
    # gap closed (0.3 − 0.1) / 0.8 on both benchmarks
    assert alice_row[4].startswith("0.25 ± ")
    assert alice_row[5].startswith(f"{late.pk} is below its earlier {early.pk} (drop 0.50 ± ")
    assert bob_row[:4] == ["bob", "1", str(only.pk), str(only.pk)] and bob_row[5] == "-"
    assert section.title in [s.title for s in provided_sections()]


def test_the_agents_on_demand_runs_are_listed_with_their_state_a_cancelled_one_included(
    tmp_path,
):
    phase = running_phase()
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    job = Job.objects.create(
        account=account, backend="local", scheduler_id="77", name="agent-eval", qos="normal",
        nodes=1, gpus=1, time_limit_minutes=120, workdir="/tmp", script="", stdout_path="",
        state="CANCELLED", gpu_seconds_charged=1800,
    )  # fmt: skip
    done = eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5}, agent=alice, checkpoint=checkpoint)
    cancelled = eval_run(phase, EvalRun.Role.AGENT, {}, agent=alice, checkpoint=checkpoint)
    EvalRun.objects.filter(pk__in=[done.pk, cancelled.pk]).update(requested_by_agent=True)
    EvalRun.objects.filter(pk=cancelled.pk).update(
        state=EvalRun.State.CANCELLED, error="cancelled by its agent", job=job, benchmarks=["gsm8k"]
    )
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.1})  # the organizers' own: not listed

    (section,) = on_demand_run_sections()
    assert [row[0] for row in section.rows] == [str(cancelled.pk), str(done.pk)]
    assert section.rows[0][1:] == [
        "alice", str(checkpoint.pk), "gsm8k", "cancelled", "77", "CANCELLED, 0.50 GPU-h",
        "cancelled by its agent",
    ]  # fmt: skip
    assert section.rows[1][4:7] == ["done", "-", "-"]
    assert section.title in [s.title for s in provided_sections()]


def test_an_agent_whose_checkpoints_have_no_qualifying_benchmark_is_told_why():
    import datetime as dt

    from django.utils import timezone

    from tests.organizer import builders

    phase = running_phase()
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.6}, n=100)
    eval_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.0}, n=100)  # below the base
    zed = builders.agent("zed")
    at = timezone.now() - dt.timedelta(hours=1)
    checkpoint = builders.checkpoint(zed, job=builders.job(zed, submitted=at), at=at)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.0}, agent=zed, checkpoint=checkpoint)

    (section,) = agent_progress_sections()
    (row,) = section.rows
    assert row[:2] == ["zed", "1"] and row[4] == "no benchmark where instruct beats base"
