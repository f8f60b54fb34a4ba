"""The demo's benchmark table says which scores measure nothing and why."""

import pytest

from arena.phases.demo import benchmark_lines
from evalsuite.models import EvalRun
from tests.evalsuite.conftest import instruct_below_base_phase
from tests.factories import eval_run, running_phase

pytestmark = pytest.mark.django_db


def test_the_demo_table_names_the_benchmarks_it_could_not_measure_and_why():
    phase = running_phase()
    eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.2, "ifeval": 0.4}, label="base")

    lines = benchmark_lines(phase)

    assert any(line.strip().startswith("gsm8k") for line in lines)
    (fixtures,) = [line for line in lines if "project's fixtures" in line]
    assert "evals fetch" in fixtures  # the demo reads the fixture hub cache


def test_each_score_in_the_demo_table_carries_its_standard_error_and_item_count():
    phase = running_phase()
    run = eval_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.2}, label="base")
    result = run.results.get(benchmark="gsm8k")

    (row,) = [line for line in benchmark_lines(phase) if line.strip().startswith("gsm8k")]

    assert row.split()[1:] == [str(result.n), f"0.20±{result.stderr:.2f}"]


def test_the_demo_shows_no_headline_for_agents_as_bad_as_an_instruct_below_the_base():
    # The demo's winogrande: it printed "median +1.00" for every agent that scored 0.
    phase = instruct_below_base_phase("ref")

    (line,) = [line for line in benchmark_lines(phase) if "gap closed, ref-1" in line]
    assert line.strip() == (
        "gap closed, ref-1: no benchmark where instruct beats base (left out: winogrande"
        " (instruct not above base: 0.000 vs 0.600))"
    )
