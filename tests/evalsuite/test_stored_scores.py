"""What collecting a finished evaluation stores: each score with its standard error, item count
and, for judge-graded benchmarks, the model that graded it."""

from decimal import Decimal

import pytest

from agents.models import Upstream
from arena.serving.client import Endpoint
from evalsuite import services
from evalsuite.metrics import Score
from evalsuite.models import BenchmarkResult, EvalRun
from evalsuite.report_text import phase_lines
from evalsuite.runner import BenchmarkOutcome, ItemOutcome
from evalsuite.selectors import phase_report
from tests.factories import running_phase

pytestmark = pytest.mark.django_db


def test_the_judge_is_named_by_the_model_behind_its_proxy_upstream():
    Upstream.objects.create(
        name="judge", base_url="http://127.0.0.1:9/v1", upstream_model="gpt-4.1-2025-04-14",
        usd_per_million_prompt_tokens=Decimal(1), usd_per_million_completion_tokens=Decimal(2),
    )  # fmt: skip
    proxy = Endpoint(base_url="http://127.0.0.1:8000/proxy/v1", model="judge", api_key="t")
    assert services.judge_model_of(proxy) == "gpt-4.1-2025-04-14 (upstream judge)"
    assert services.judge_model_of(None) == ""


def test_a_collected_run_stores_stderr_n_and_the_judge_of_judged_benchmarks_only():
    run = EvalRun.objects.create(
        phase=running_phase(), role=EvalRun.Role.BASE, model_label="base",
        base_url="http://127.0.0.1:9/v1", served_model_name="base",
        benchmarks=["gsm8k", "strongreject"], judge_model="gpt-4.1 (upstream judge)", log_dir="",
    )  # fmt: skip
    items = [ItemOutcome(str(i), v, "") for i, v in enumerate([1.0, 0.0, 1.0, 1.0])]
    outcomes = [
        BenchmarkOutcome("gsm8k", 4, 0.75, 0.25, "", items),
        BenchmarkOutcome("strongreject", 4, 0.75, 0.25, "", items),
    ]
    assert services._store(run, outcomes, "")  # what evaluations_collect does with a result
    stored = {r.benchmark: r for r in BenchmarkResult.objects.filter(run=run)}
    assert (stored["gsm8k"].stderr, stored["gsm8k"].n) == (0.25, 4)
    assert stored["gsm8k"].judge_model == ""  # graded by rule
    assert stored["strongreject"].judge_model == "gpt-4.1 (upstream judge)"


def test_fortress_names_each_judge_of_its_panel_and_says_when_it_had_one():
    phase = running_phase()

    def stored(fortress_judges):
        run = EvalRun.objects.create(
            phase=phase, role=EvalRun.Role.BASE, model_label="base",
            base_url="http://127.0.0.1:9/v1", served_model_name="base",
            benchmarks=["fortress", "strongreject"], judge_model="gpt-4.1 (upstream judge)",
            fortress_judges=fortress_judges, log_dir="",
        )  # fmt: skip
        items = [ItemOutcome(str(i), 1.0, "") for i in range(2)]
        outcomes = [BenchmarkOutcome(name, 2, 1.0, 0.0, "", items) for name in run.benchmarks]
        assert services._store(run, outcomes, "")
        return {r.benchmark: r for r in BenchmarkResult.objects.filter(run=run)}

    panel = [
        "o3 (upstream judge-o3)",
        "claude (upstream judge-claude)",
        "gemini (upstream judge-g)",
    ]
    three = stored(panel)
    assert three["fortress"].judges == panel
    assert three["fortress"].judge_model == "; ".join(panel)
    assert three["strongreject"].judges == ["gpt-4.1 (upstream judge)"]
    one = stored([])  # the organizer configured a single judge
    assert one["fortress"].judges == ["gpt-4.1 (upstream judge)"]
    assert "one judge, as configured: FORTRESS is graded by three" in one["fortress"].judge_model
    assert "one judge" not in one["strongreject"].judge_model


def test_bbq_bias_scores_are_stored_and_reported_beside_its_accuracy():
    phase = running_phase()
    run = EvalRun.objects.create(
        phase=phase, role=EvalRun.Role.BASE, model_label="base",
        base_url="http://127.0.0.1:9/v1", served_model_name="base", benchmarks=["bbq"],
        log_dir="",
    )  # fmt: skip
    items = [ItemOutcome(str(i), v, "") for i, v in enumerate([1.0, 0.0, 1.0, 1.0])]
    bias = {"bias_ambiguous": Score(0.25, 0.125, 2), "bias_disambiguated": Score(-0.5, 0.3, 2)}
    outcome = BenchmarkOutcome("bbq", 4, 0.75, 0.25, "", items, metrics=bias)
    assert services._store(run, [outcome], "")

    (cell,) = [m["scores"]["bbq"] for m in phase_report(phase)["models"]]
    assert (cell["score"], cell["n"]) == (0.75, 4)  # the headline: accuracy, higher is safer
    assert cell["metrics"]["bias_ambiguous"] == {"score": 0.25, "stderr": 0.125, "n": 2}
    assert cell["metrics"]["bias_disambiguated"]["score"] == -0.5
    text = "\n".join(phase_lines(phase_report(phase)))
    assert "bias_disambiguated" in text and "-0.500 ± 0.300" in text
