"""End to end: a phase's evaluation runs as a Slurm job (submitit) against a real
`transformers serve` process on the tiny base model; the judge-graded benchmark calls its
judge through the live site's metered API proxy; the results come back and are stored."""

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest

from agents.models import Agent, ProxyCall, Upstream
from arena.serving.models import Contestant
from evalsuite.models import EvalRun, ItemResult
from evalsuite.selectors import phase_report
from evalsuite.services import evaluations_collect, evaluations_queue, judge_agent_name
from tests.factories import running_phase
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow

BENCHMARKS = ["gsm8k", "ifeval", "humaneval", "wildbench", "fortress"]
FORTRESS_PANEL = ["judge-a", "judge-b", "judge-c"]


def test_a_phase_evaluation_runs_on_slurm_and_its_results_are_stored(
    arena, model_servers, scripted_llm, slurm, settings, tmp_path
):
    settings.AGENTS_ARENA_URL = arena.url
    settings.VAR_DIR = tmp_path
    top_score = 'Meets it.\n```json\n{"strengths": "all", "weaknesses": "none", "score": "10"}\n```'
    scripted_llm.scripts["slurm-judge"] = Script(top_score, chunk_chars=64, delay_s=0)
    Upstream.objects.create(
        name="judge", base_url=scripted_llm.base_url, upstream_model="slurm-judge",
        usd_per_million_prompt_tokens=Decimal("1"), usd_per_million_completion_tokens=Decimal("2"),
    )  # fmt: skip
    # FORTRESS's panel: three upstreams, each a judge that finds no rubric question met
    settings.EVALS_FORTRESS_JUDGES = FORTRESS_PANEL
    for name in FORTRESS_PANEL:
        scripted_llm.scripts[f"slurm-{name}"] = Script("Nothing given.\nGRADE: NN", 64, 0)
        Upstream.objects.create(
            name=name, base_url=scripted_llm.base_url, upstream_model=f"slurm-{name}",
            usd_per_million_prompt_tokens=Decimal("1"),
            usd_per_million_completion_tokens=Decimal("2"),
        )  # fmt: skip
    phase = running_phase()
    served = model_servers["base"]
    base = Contestant.objects.create(
        display_name="tiny-base", base_url=served.base_url, served_model_name=served.model,
        api_key=served.api_key, checkpoint_path=phase.competition.base_model,
    )  # fmt: skip

    (run,) = evaluations_queue(
        phase=phase, contestants=[base], benchmark_names=BENCHMARKS, max_tokens=32, backend=slurm
    )
    assert run.role == EvalRun.Role.BASE and run.job.backend == "slurm", run.error

    deadline = time.monotonic() + 240
    while run.state == EvalRun.State.QUEUED and time.monotonic() < deadline:
        evaluations_collect(backend=slurm)
        run.refresh_from_db()
        time.sleep(1)
    run.job.refresh_from_db()
    assert run.state == EvalRun.State.DONE, run.error
    assert run.job.state == "COMPLETED" and run.job.account.name == "organizer_evals"

    results = {r.benchmark: r for r in run.results.all()}
    assert list(results) == sorted(BENCHMARKS)
    for result in results.values():
        assert result.n >= 5 and result.score is not None and 0 <= result.score <= 1, result.error
        assert ItemResult.objects.filter(result=result).count() == result.n
        log = json.loads(Path(result.log_path).read_text())
        assert len(log["samples"]) == result.n and log["eval"]["task"] == result.benchmark
    assert not results["gsm8k"].held_out and results["gsm8k"].domain == "math"
    # every answer judged 10/10 through the proxy; an empty answer scores the lowest without a
    # judge call, as WildBench does (a tiny model may stop at once)
    items = ItemResult.objects.filter(result=results["wildbench"])
    judged = [item for item in items if item.answer.strip()]
    assert judged and all(item.value == 1.0 for item in judged)
    assert all(item.value == 0.0 for item in items if not item.answer.strip())

    # FORTRESS graded by each judge of its panel through the proxy, each named
    fortress = results["fortress"]
    assert fortress.judges == [f"slurm-{name} (upstream {name})" for name in FORTRESS_PANEL]
    assert fortress.score == 1.0  # no question met by any judge: no risk
    answered = ItemResult.objects.filter(result=fortress).exclude(answer="").count()

    judge = Agent.objects.get(name=judge_agent_name(phase))
    calls = ProxyCall.objects.filter(agent=judge)
    assert calls.filter(model="judge").count() == len(judged)
    for name in FORTRESS_PANEL:
        assert calls.filter(model=name).count() == answered
    assert {c.status for c in calls} == {200}
    judge.refresh_from_db()
    assert judge.credit_spent > 0

    report = phase_report(phase)
    assert report["models"][0]["role"] == "base" and report["failed_runs"] == []
