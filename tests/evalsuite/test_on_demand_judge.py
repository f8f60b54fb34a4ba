"""A judge-graded proxy benchmark run on demand bills its judge to the agent: the job is handed
a proxy token of the agent's own (never an organizer's, never an upstream key), the judge's
calls go through the live site's metered proxy to the scripted LLM server and come off the
agent's credit, and the token stops working once the run ends."""

from __future__ import annotations

import stat
from decimal import Decimal
from pathlib import Path

import cloudpickle
import httpx2
import pytest

from agents.models import Agent, ProxyCall, Upstream
from cluster.backends import cluster_backend
from cluster.models import ClusterAccount
from evalsuite.checkpoint_job import evaluate_checkpoint
from evalsuite.models import EvalRun
from evalsuite.on_demand import agent_evaluation_cancel, agent_evaluation_request
from evalsuite.runner import run_benchmarks
from evalsuite.services import judge_agent_name
from tests.evalsuite.on_demand_builders import (
    checkpoint_of,
    gpu_held,
    judged_proxy_benchmark,
    provisioned,
)
from tests.factories import running_phase
from tests.support.scripted_llm import Script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The top grade in each judged format of the suite: model-graded QA's C, a 1-10 JSON block.
TOP_GRADE = (
    'Meets it.\nGRADE: C\n```json\n{"strengths": "all", "weaknesses": "none", "score": 10}\n```'
)


def test_the_judge_of_an_on_demand_run_is_billed_to_the_agent(
    arena, scripted_llm, settings, tmp_path
):
    settings.AGENTS_ARENA_URL = arena.url
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 5
    scripted_llm.scripts["od-judge"] = Script(TOP_GRADE, chunk_chars=64, delay_s=0)
    scripted_llm.scripts["od-model"] = Script("A helpful answer.", chunk_chars=64, delay_s=0)
    Upstream.objects.create(
        name="judge", base_url=scripted_llm.base_url, upstream_model="od-judge",
        usd_per_million_prompt_tokens=Decimal("1"), usd_per_million_completion_tokens=Decimal("2"),
    )  # fmt: skip
    phase = running_phase()
    judged = judged_proxy_benchmark()
    alice, account = provisioned("alice", tmp_path)
    ClusterAccount.objects.filter(pk=account.pk).update(max_gpus=1)
    backend = cluster_backend()
    holder = gpu_held(account, backend, tmp_path)  # the evaluation job waits
    try:
        run = agent_evaluation_request(
            agent=alice, checkpoint_id=checkpoint_of(alice, account).pk,
            benchmark_names=[judged], backend=backend,
        )  # fmt: skip
        assert run.state == EvalRun.State.QUEUED, run.error

        # What the job is handed: the call pickled in the run's folder, which only the
        # platform's user (who runs the job) may enter.
        folder = Path(settings.VAR_DIR) / "evals" / "agents" / "alice" / f"run-{run.pk}"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        (pickled,) = folder.glob("callable-*.pkl")
        function, _, kwargs = cloudpickle.loads(pickled.read_bytes())
        judge = kwargs["job"].judge
        assert function is evaluate_checkpoint
        assert judge.base_url == f"{arena.url}/proxy/v1" and judge.model == "judge"
        assert judge.api_key.startswith("arena_judge_")

        # The job's benchmark run, its judge reached through the proxy with that token.
        model = type(judge)(base_url=scripted_llm.base_url, model="od-model")
        (graded,) = run_benchmarks(
            endpoint=model, benchmark_names=[judged], log_dir=str(tmp_path / "logs"),
            judge=judge, max_tokens=32,
        )  # fmt: skip
        assert graded.score == 1.0 and graded.n >= 5, graded.error

        calls = ProxyCall.objects.filter(agent=alice)
        assert calls.count() == graded.n
        assert {(c.model, c.status) for c in calls} == {("judge", 200)}
        alice.refresh_from_db()
        assert alice.credit_spent == sum(c.cost_usd for c in calls) > 0
        assert not Agent.objects.filter(name=judge_agent_name(phase)).exists()  # no organizer

        agent_evaluation_cancel(agent=alice, run_id=run.pk, backend=backend)
        after = httpx2.post(
            f"{judge.base_url}/chat/completions",
            json={"model": "judge", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {judge.api_key}"},
            timeout=30,
        )
        assert after.status_code == 401  # the run has ended: its token bills nothing more
    finally:
        backend.cancel(scheduler_id=holder.scheduler_id, unix_user="")
