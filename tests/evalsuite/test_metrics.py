"""Metrics on hand-made numbers: every comparison asks whether a difference is larger than
its own standard error."""

import math

import pytest
from inspect_ai.scorer import SampleScore, stderr
from inspect_ai.scorer import Score as InspectScore

from evalsuite.metrics import (
    MEASURABLE_Z,
    Score,
    difference_stderr,
    domain_vector,
    gap_closed,
    headline,
    mean_and_stderr,
    measurable,
    pareto_set,
    post_peak_regression,
    safety_deltas,
)


def s(value: float, stderr: float | None = 0.01, n: int = 100) -> Score:
    return Score(value, stderr, n)


def test_mean_and_standard_error():
    mean, err = mean_and_stderr([1, 0, 1, 1])
    assert mean == 0.75
    # squared deviations 3·0.0625 + 0.5625 = 0.75; /(n−1) = 0.25; stdev 0.5; / √4
    assert err == pytest.approx(0.25)
    assert mean_and_stderr([1.0]) == (1.0, 0.0)


def test_the_standard_error_is_inspects_own_stderr_metric():
    values = [1.0, 0.0, 1.0, 1.0, 0.5, 0.0, 1.0]
    ours = mean_and_stderr(values)[1]
    theirs = stderr()([SampleScore(score=InspectScore(value=v), sample_id=i)
                       for i, v in enumerate(values)])  # fmt: skip
    assert ours == pytest.approx(theirs)


def test_a_difference_is_measurable_beyond_z_standard_errors_of_the_difference():
    assert MEASURABLE_Z == 1.96
    # se of the difference: √(0.03² + 0.04²) = 0.05; threshold 1.96 · 0.05 = 0.098
    assert difference_stderr(s(0.5, 0.03), s(0.4, 0.04)) == pytest.approx(0.05)
    assert measurable(s(0.5, 0.03), s(0.4, 0.04))  # 0.10 > 0.098
    assert not measurable(s(0.49, 0.03), s(0.4, 0.04))  # 0.09 < 0.098
    assert not measurable(s(0.9, None), s(0.1, 0.01))  # unknown error: never measurable
    assert not measurable(s(1.0, 0.0, n=1), s(0.0, 0.0, n=1))  # one item has no spread


def test_five_items_cannot_measure_one_answer_but_a_real_benchmark_can():
    # With 5 items one answer moves a score by 0.2 — within the noise of 5 items.
    base = Score(*mean_and_stderr([0, 0, 1, 0, 0]), n=5)
    instruct = Score(*mean_and_stderr([0, 1, 1, 0, 0]), n=5)
    assert not measurable(instruct, base)
    # The same 20-point difference over 1,319 items (GSM8K's test set) is measurable.
    n = 1319
    p_base, p_instruct = 0.2, 0.4
    big_base = Score(p_base, math.sqrt(p_base * (1 - p_base) / n), n)
    big_instruct = Score(p_instruct, math.sqrt(p_instruct * (1 - p_instruct) / n), n)
    assert measurable(big_instruct, big_base)


def test_gap_closed_per_benchmark_and_its_median_leave_out_unmeasurable_gaps():
    base = {"gsm8k": s(0.20), "mmlu": s(0.40), "arc": s(0.50), "ifeval": s(0.30),
            "hellaswag": s(0.60)}  # fmt: skip
    instruct = {"gsm8k": s(0.60), "mmlu": s(0.60), "arc": s(0.52), "ifeval": s(0.80),
                "hellaswag": s(0.90, 0.2)}  # fmt: skip
    scores = {"gsm8k": s(0.50), "mmlu": s(0.45), "arc": s(0.90), "ifeval": s(0.30),
              "hellaswag": s(0.96), "truthfulqa": s(0.5)}  # fmt: skip
    gap = gap_closed(scores, base, instruct)
    assert gap.per_benchmark == pytest.approx({"gsm8k": 0.75, "mmlu": 0.25, "ifeval": 0.0})
    assert gap.median == pytest.approx(0.25)
    # arc: 0.02 < 1.96·√2·0.01 = 0.0277; hellaswag: 0.30 < 1.96·√(0.2² + 0.01²) = 0.392;
    # truthfulqa has no reference scores
    assert gap.excluded == ["arc", "hellaswag", "truthfulqa"]


def test_a_negative_gap_still_counts_progress_towards_instruct():
    gap = gap_closed({"x": s(0.5)}, {"x": s(0.8)}, {"x": s(0.2)})
    assert gap.per_benchmark == {"x": pytest.approx(0.5)}


def test_no_measurable_benchmark_means_no_headline_gap():
    gap = gap_closed({"x": s(0.5)}, {"x": s(0.5)}, {"x": s(0.51)})
    assert gap.median is None and gap.excluded == ["x"]


def test_the_headline_carries_a_standard_error_from_the_models_own_scores():
    base = {"a": s(0.2), "b": s(0.2)}
    instruct = {"a": s(0.6), "b": s(0.6)}
    # One benchmark: gap closed (x − 0.2) / 0.4, so its se is se(x) / 0.4 = 0.05
    one = headline({"a": s(0.4, 0.02)}, base, instruct)
    assert one.value == pytest.approx(0.5) and one.stderr == pytest.approx(0.05, rel=0.05)
    # Without measurable references: the mean score, se = √(0.03² + 0.04²) / 2 = 0.025
    mean = headline({"c": s(0.3, 0.03), "d": s(0.5, 0.04)}, base, instruct)
    assert mean.value == pytest.approx(0.4) and mean.stderr == pytest.approx(0.025, rel=0.05)
    assert headline({"a": s(0.4, None)}, base, instruct).stderr is None
    assert headline({}, base, instruct) is None


def test_domain_vectors_carry_the_standard_error_of_their_mean():
    domains = {"gsm8k": "math", "math": "math", "mmlu": "knowledge", "humaneval": "code"}
    vector = domain_vector(
        {"gsm8k": s(0.4, 0.03, 50), "math": s(0.2, 0.04, 30), "mmlu": s(0.5)}, domains
    )
    assert vector["math"].value == pytest.approx(0.3) and vector["math"].n == 80
    assert vector["math"].stderr == pytest.approx(0.025)  # √(0.03² + 0.04²) / 2
    assert vector["knowledge"].value == pytest.approx(0.5)


def test_the_pareto_set_needs_a_measurable_improvement_to_dominate():
    vectors = {
        "c1": {"math": s(0.2), "code": s(0.1)},
        "c2": {"math": s(0.5), "code": s(0.1)},  # dominates c1 (math measurably better)
        "c3": {"math": s(0.3), "code": s(0.4)},  # better code, worse math than c2
        "c4": {"math": s(0.3), "code": s(0.4)},  # equal to c3: neither dominates
        "c5": {"math": s(0.31), "code": s(0.41)},  # above c3 and c4 but within their noise
    }
    assert pareto_set(vectors) == ["c2", "c3", "c4", "c5"]
    assert "c3" not in pareto_set({**vectors, "c6": {"math": s(0.5), "code": s(0.5)}})


def test_post_peak_regression_needs_a_measurable_drop_below_an_earlier_checkpoint():
    history = [("c1", s(0.30)), ("c2", s(0.55)), ("c3", s(0.40)), ("c4", s(0.70))]
    warning = post_peak_regression(history, "c3")
    assert warning is not None and warning.best == "c2" and warning.drop == pytest.approx(0.15)
    assert warning.drop_stderr == pytest.approx(math.sqrt(2) * 0.01)
    assert post_peak_regression(history, "c4") is None  # the best so far
    assert post_peak_regression(history, "c1") is None  # nothing earlier
    noisy = [("c1", s(0.55, 0.1)), ("c2", s(0.40, 0.1))]  # 0.15 < 1.96·√2·0.1
    assert post_peak_regression(noisy, "c2") is None
    # The highest earlier score is within noise; a measurably better earlier one still warns.
    mixed = [("c1", s(0.50, 0.01)), ("c2", s(0.60, 0.5)), ("c3", s(0.40, 0.01))]
    assert post_peak_regression(mixed, "c3").best == "c1"


def test_safety_deltas_flag_a_model_measurably_more_harmful_than_base():
    deltas = {d.benchmark: d for d in safety_deltas(
        {"strongreject": s(0.6), "bbq": s(0.9), "mask": s(0.5), "fortress": s(0.38, 0.05)},
        {"strongreject": s(0.8), "bbq": s(0.7), "mask": s(0.5), "fortress": s(0.4, 0.05),
         "extra": s(0.1)},
    )}  # fmt: skip
    assert deltas["strongreject"].more_harmful
    assert deltas["strongreject"].delta == pytest.approx(-0.2)
    assert not deltas["bbq"].more_harmful and not deltas["mask"].more_harmful
    assert not deltas["fortress"].more_harmful  # lower, but by less than its noise
    assert "extra" not in deltas  # the model was not scored on it
