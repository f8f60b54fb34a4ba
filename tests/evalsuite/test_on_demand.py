"""Evaluation on demand through the agent API: an agent asks for proxy benchmarks on its own
registered checkpoints, sees its runs with per-item outputs, and its Pareto set and post-peak
warning; held-out benchmarks, other agents' checkpoints and floods are refused. (The run on
the cluster itself: test_on_demand_slurm.py.)"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import include, path

from agents.models import Agent, Nomination, Upstream
from agents.selectors import agent_for_proxy_token
from agents.services import token_issue
from arena import api_v1
from cluster.backends import cluster_backend
from cluster.models import ClusterAccount
from evalsuite.models import EvalRun, ItemResult
from evalsuite.on_demand import on_demand_benchmarks
from evalsuite.selectors import phase_report
from evalsuite.services import evaluations_collect
from tests.evalsuite.on_demand_builders import (
    checkpoint_of,
    gpu_held,
    judged_proxy_benchmark,
    provisioned,
)
from tests.factories import eval_run, running_phase

urlpatterns = [path("api/v1/", api_v1.urls), path("", include("agents.urls"))]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

JUDGED = judged_proxy_benchmark()


@pytest.fixture
def phase():
    phase = running_phase()
    eval_run(phase, EvalRun.Role.BASE, {"mmlu": 0.2, "gsm8k": 0.1, "math": 0.1}, n=100)
    eval_run(phase, EvalRun.Role.INSTRUCT, {"mmlu": 0.8, "gsm8k": 0.9, "math": 0.9}, n=100)
    return phase


def api(agent, method: str, route: str, body: dict | None = None):
    token = token_issue(agent=agent, kind="api")
    client = Client(headers={"Authorization": f"Bearer {token}"})
    if method == "POST":
        return client.post(route, data=json.dumps(body), content_type="application/json")
    return client.get(route)


def test_held_out_and_unknown_benchmarks_are_refused_by_name(phase, tmp_path):
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    for name, code in (("mmlu-pro", "held_out_benchmark"), ("strongreject", "held_out_benchmark"),
                       ("../../gsm8k", "unknown_benchmark")):  # fmt: skip
        reply = api(alice, "POST", "/api/v1/evals/runs",
                    {"checkpoint": checkpoint.pk, "benchmarks": ["gsm8k", name]})  # fmt: skip
        assert reply.status_code == 400, name
        assert reply.json()["error"]["code"] == code
        assert "you may run: gsm8k, mmlu" in reply.json()["error"]["message"]
    assert not EvalRun.objects.filter(agent=alice).exists()
    assert "mmlu-pro" not in on_demand_benchmarks() and "gsm8k" in on_demand_benchmarks()
    assert JUDGED in on_demand_benchmarks()  # billed to the agent


def test_a_judged_benchmark_is_refused_without_a_judge_or_when_the_agents_credit_is_spent(
    phase, tmp_path
):
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    body = {"checkpoint": checkpoint.pk, "benchmarks": ["gsm8k", JUDGED]}
    reply = api(alice, "POST", "/api/v1/evals/runs", body)
    assert reply.status_code == 409 and reply.json()["error"]["code"] == "no_judge"
    assert f"{JUDGED} is graded by a judge model" in reply.json()["error"]["message"]

    _judge_upstream()
    Agent.objects.filter(pk=alice.pk).update(credit_spent=Decimal("299.80"))
    reply = api(alice, "POST", "/api/v1/evals/runs", body)
    assert reply.status_code == 402 and reply.json()["error"]["code"] == "credit_exhausted"
    assert reply.json()["error"]["message"].startswith(
        f"your API credit is spent ($0.20 of $300.00 left): {JUDGED} is graded by a judge "
        "model whose calls are billed to your credit, and a run needs at least $0.50 of it"
    )
    assert not EvalRun.objects.filter(agent=alice).exists()


def test_a_judged_run_has_a_judge_token_of_the_agents_own_until_it_ends(phase, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 5
    _judge_upstream()
    alice, account = provisioned("alice", tmp_path)
    own_proxy_token = token_issue(agent=alice, kind="proxy")
    ClusterAccount.objects.filter(pk=account.pk).update(max_gpus=1)
    backend = cluster_backend()
    holder = gpu_held(account, backend, tmp_path)
    try:
        body = {"checkpoint": checkpoint_of(alice, account).pk, "benchmarks": [JUDGED]}
        started = api(alice, "POST", "/api/v1/evals/runs", body)
        assert started.status_code == 201 and started.json()["state"] == "queued"
        run = EvalRun.objects.select_related("judge_token").get(pk=started.json()["id"])
        assert run.judge_model == "scripted-judge (upstream judge)"
        assert run.judge_token.agent == alice and run.judge_token.kind == "judge"
        assert run.judge_token.revoked_at is None
        assert agent_for_proxy_token(own_proxy_token) == alice  # the agent's own still works

        api(alice, "POST", f"/api/v1/evals/runs/{run.pk}/cancel")
        run.judge_token.refresh_from_db()
        assert run.judge_token.revoked_at is not None
        assert agent_for_proxy_token(own_proxy_token) == alice
    finally:
        backend.cancel(scheduler_id=holder.scheduler_id, unix_user="")


def _judge_upstream() -> Upstream:
    return Upstream.objects.create(
        name="judge", base_url="http://127.0.0.1:9/v1", upstream_model="scripted-judge",
        usd_per_million_prompt_tokens=Decimal("1"), usd_per_million_completion_tokens=Decimal("2"),
    )  # fmt: skip


def test_only_the_agents_own_checkpoints_can_be_evaluated(phase, tmp_path):
    alice, _ = provisioned("alice", tmp_path)
    bob, bob_account = provisioned("bob", tmp_path)
    bobs = checkpoint_of(bob, bob_account)
    reply = api(alice, "POST", "/api/v1/evals/runs", {"checkpoint": bobs.pk})
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "not_found"
    for body in ({"checkpoint": "ckpt-1"}, {"checkpoint": bobs.pk, "benchmarks": "gsm8k"}, {}):
        assert api(alice, "POST", "/api/v1/evals/runs", body).status_code == 400
    assert not EvalRun.objects.exists() or not EvalRun.objects.filter(agent__in=[alice, bob])


def test_an_agent_may_have_only_so_many_runs_queued(phase, tmp_path, settings):
    settings.EVALS_AGENT_MAX_QUEUED = 2
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    for _ in range(2):
        EvalRun.objects.create(
            phase=phase, role=EvalRun.Role.AGENT, agent=alice, checkpoint=checkpoint,
            requested_by_agent=True, model_label="x", base_url="", served_model_name="",
            benchmarks=["gsm8k"], log_dir="",
        )  # fmt: skip
    reply = api(alice, "POST", "/api/v1/evals/runs", {"checkpoint": checkpoint.pk})
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "too_many_runs"
    assert "the most at once is 2" in reply.json()["error"]["message"]
    assert EvalRun.objects.filter(agent=alice).count() == 2


def test_the_job_is_charged_to_the_agents_account_and_refused_when_its_budget_is_spent(
    phase, tmp_path, settings
):
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 120
    alice, account = provisioned("alice", tmp_path, gpu_hours=1)  # 1 GPU for 2 h is too much
    checkpoint = checkpoint_of(alice, account)
    reply = api(alice, "POST", "/api/v1/evals/runs",
                {"checkpoint": checkpoint.pk, "benchmarks": ["gsm8k"]})  # fmt: skip
    assert reply.status_code == 201
    run = reply.json()
    assert run["state"] == "failed" and run["benchmarks"] == ["gsm8k"]
    assert "overrun the account's GPU-hour budget" in run["error"]
    assert "2.00 GPU-h and 1.00 of 1 GPU-h are left" in run["error"]
    stored = EvalRun.objects.get(pk=run["id"])
    assert stored.requested_by_agent and stored.checkpoint == checkpoint and stored.job is None
    # a failed run is not queued: it does not count against the limit
    assert api(alice, "GET", "/api/v1/evals/runs").json()["runs"][0]["id"] == run["id"]


def test_an_agent_reads_its_runs_scores_and_per_item_outputs_for_proxy_benchmarks_only(
    phase, tmp_path
):
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    run = eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5, "mbpp": 0.7777}, agent=alice,
                   checkpoint=checkpoint, stderr=0.25, n=4)  # fmt: skip
    EvalRun.objects.filter(pk=run.pk).update(requested_by_agent=True)
    for result in run.results.all():
        ItemResult.objects.bulk_create(
            ItemResult(result=result, item_id=f"{result.benchmark}-{i}", value=float(i % 2),
                       answer=f"secret-{result.benchmark}-{i}")
            for i in range(4)
        )  # fmt: skip
    listed = api(alice, "GET", "/api/v1/evals/runs").json()["runs"]
    assert [r["id"] for r in listed] == [run.pk]
    assert listed[0]["results"] == [
        {"benchmark": "gsm8k", "domain": "math", "score": 0.5, "stderr": 0.25, "n": 4, "error": ""}
    ]
    shown = api(alice, "GET", f"/api/v1/evals/runs/{run.pk}")
    assert shown.status_code == 200
    (gsm8k,) = shown.json()["results"]
    assert [(i["item_id"], i["value"], i["answer"]) for i in gsm8k["items"]] == [
        (f"gsm8k-{i}", float(i % 2), f"secret-gsm8k-{i}") for i in range(4)
    ]
    text = shown.content.decode() + json.dumps(listed)
    assert "mbpp" not in text and "0.7777" not in text  # held out: not a word of it

    bob, _ = provisioned("bob", tmp_path)
    for route in (
        f"/api/v1/evals/runs/{run.pk}",
        "/api/v1/evals/runs/1%00",
        "/api/v1/evals/runs/x",
    ):
        assert api(bob, "GET", route).status_code == 404
    assert api(bob, "GET", "/api/v1/evals/runs").json() == {"runs": []}


def test_the_pareto_set_and_post_peak_warning_appear_in_get_evals(phase, tmp_path):
    alice, account = provisioned("alice", tmp_path)
    first, second, third = (checkpoint_of(alice, account, n) for n in (1, 2, 3))
    # first: good at math and knowledge; second: worse at both (dominated, a regression);
    # third: best at knowledge, worst at math. The held-out "math" would change the vectors.
    for checkpoint, scores in ((first, {"gsm8k": 0.8, "mmlu": 0.6, "math": 0.1}),
                               (second, {"gsm8k": 0.3, "mmlu": 0.3, "math": 0.9}),
                               (third, {"gsm8k": 0.2, "mmlu": 0.9})):  # fmt: skip
        eval_run(phase, EvalRun.Role.AGENT, scores, agent=alice, checkpoint=checkpoint, n=100)
    Nomination.objects.create(
        agent=alice, phase=phase, checkpoint=second, model_card="", card_fields={}
    )
    progress = api(alice, "GET", "/api/v1/evals").json()["progress"]
    assert progress["held_out_included"] is False
    assert progress["pareto"] == [str(first.pk), str(third.pk)]
    assert set(progress["domains"][str(first.pk)]) == {"math", "knowledge"}
    assert progress["domains"][str(first.pk)]["math"]["score"] == 0.8  # gsm8k alone
    assert progress["chosen"] == str(second.pk) and progress["chosen_is_nominated"]
    warning = progress["post_peak"]
    assert warning["chosen"] == str(second.pk) and warning["best"] == str(first.pk)
    assert warning["drop"] > 0.3


def test_the_phase_report_leaves_out_the_agents_own_runs_but_its_post_peak_check_uses_them(
    phase, tmp_path
):
    alice, account = provisioned("alice", tmp_path)
    early, nominated = checkpoint_of(alice, account, 1), checkpoint_of(alice, account, 2)
    own = eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.9, "mmlu": 0.9}, agent=alice,
                   checkpoint=early, label="alice checkpoint 1", n=100)  # fmt: skip
    failed = eval_run(phase, EvalRun.Role.AGENT, {}, agent=alice, checkpoint=early, label="x")
    EvalRun.objects.filter(pk__in=[own.pk, failed.pk]).update(requested_by_agent=True)
    EvalRun.objects.filter(pk=failed.pk).update(state=EvalRun.State.FAILED, error="no copy")
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.2, "mmlu": 0.3}, agent=alice,
             checkpoint=nominated, label="alice-nominee", n=100)  # fmt: skip
    Nomination.objects.create(
        agent=alice, phase=phase, checkpoint=nominated, model_card="", card_fields={}
    )
    report = phase_report(phase)
    assert [m["model"] for m in report["models"]] == ["base", "instruct", "alice-nominee"]
    assert report["failed_runs"] == []
    (warning,) = report["post_peak_warnings"]
    assert (warning["nominated"], warning["best"]) == (str(nominated.pk), str(early.pk))


def test_an_agent_cancels_its_queued_run_and_its_job_is_cancelled(phase, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 5
    alice, account = provisioned("alice", tmp_path)
    ClusterAccount.objects.filter(pk=account.pk).update(max_gpus=1)
    backend = cluster_backend()
    # The account's one GPU is taken, so the evaluation job waits in the queue.
    holder = gpu_held(account, backend, tmp_path)
    try:
        started = api(alice, "POST", "/api/v1/evals/runs",
                      {"checkpoint": checkpoint_of(alice, account).pk, "benchmarks": ["gsm8k"]})  # fmt: skip
        assert started.status_code == 201 and started.json()["state"] == "queued", started.json()
        run_id = started.json()["id"]

        reply = api(alice, "POST", f"/api/v1/evals/runs/{run_id}/cancel")
        assert reply.status_code == 200, reply.json()
        assert (
            reply.json()["state"] == "cancelled"
            and reply.json()["error"] == "cancelled by its agent"
        )
        run = EvalRun.objects.select_related("job").get(pk=run_id)
        assert run.state == EvalRun.State.CANCELLED and run.finished_at is not None
        assert run.job.state == "CANCELLED"  # synced from the scheduler

        as_a_job = api(alice, "POST", f"/api/v1/jobs/{run.job.scheduler_id}/cancel")
        assert as_a_job.status_code == 409 and as_a_job.json()["error"]["message"].startswith(
            f"job {run.job.scheduler_id} runs your evaluation run {run_id}: cancel that with "
            f"`arena-agent evals cancel {run_id}`"
        )

        again = api(alice, "POST", f"/api/v1/evals/runs/{run_id}/cancel")
        assert again.status_code == 409 and again.json()["error"]["code"] == "run_finished"
        assert "already cancelled" in again.json()["error"]["message"]
        evaluations_collect(backend=backend)  # a cancelled run is never collected as failed
        assert EvalRun.objects.get(pk=run_id).state == EvalRun.State.CANCELLED
    finally:
        backend.cancel(scheduler_id=holder.scheduler_id, unix_user="")


def test_a_finished_run_and_another_agents_run_cannot_be_cancelled(phase, tmp_path):
    alice, account = provisioned("alice", tmp_path)
    bob, _ = provisioned("bob", tmp_path)
    done = eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.5}, agent=alice,
                    checkpoint=checkpoint_of(alice, account), n=4)  # fmt: skip
    EvalRun.objects.filter(pk=done.pk).update(requested_by_agent=True)

    refused = api(alice, "POST", f"/api/v1/evals/runs/{done.pk}/cancel")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_finished"
    assert refused.json()["error"]["message"] == (
        f"evaluation run {done.pk} is already done: only a queued or running run can be cancelled"
    )
    EvalRun.objects.filter(pk=done.pk).update(state=EvalRun.State.QUEUED)
    for route in (f"/api/v1/evals/runs/{done.pk}/cancel", "/api/v1/evals/runs/x/cancel"):
        reply = api(bob, "POST", route)
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "not_found"
    assert api(alice, "GET", f"/api/v1/evals/runs/{done.pk}/cancel").status_code == 405
    assert EvalRun.objects.get(pk=done.pk).state == EvalRun.State.QUEUED  # bob changed nothing


def test_a_judged_run_the_scheduler_refuses_leaves_no_live_judge_token(phase, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 120
    _judge_upstream()
    alice, account = provisioned("alice", tmp_path, gpu_hours=1)  # 1 GPU for 2 h is too much
    body = {"checkpoint": checkpoint_of(alice, account).pk, "benchmarks": [JUDGED]}
    reply = api(alice, "POST", "/api/v1/evals/runs", body)
    assert reply.status_code == 201 and reply.json()["state"] == "failed"
    run = EvalRun.objects.select_related("judge_token").get(pk=reply.json()["id"])
    assert run.judge_token.revoked_at is not None


def test_a_run_whose_job_has_ended_is_collected_not_cancelled(phase, tmp_path):
    alice, account = provisioned("alice", tmp_path)
    checkpoint = checkpoint_of(alice, account)
    run = EvalRun.objects.create(
        phase=phase, role=EvalRun.Role.AGENT, agent=alice, checkpoint=checkpoint,
        requested_by_agent=True, model_label="x", base_url="", served_model_name="",
        benchmarks=["gsm8k"], log_dir="", job=checkpoint.job,  # a COMPLETED job
    )  # fmt: skip
    reply = api(alice, "POST", f"/api/v1/evals/runs/{run.pk}/cancel")
    assert reply.status_code == 409 and reply.json()["error"]["code"] == "run_finished"
    assert "has already ended (its job alice-1 is COMPLETED)" in reply.json()["error"]["message"]
    assert EvalRun.objects.get(pk=run.pk).state == EvalRun.State.QUEUED
