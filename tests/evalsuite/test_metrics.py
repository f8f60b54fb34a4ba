"""Metrics on hand-made numbers."""

import pytest

from evalsuite.metrics import (
    MIN_MEASURABLE_GAP,
    domain_vector,
    gap_closed,
    mean_and_stderr,
    pareto_set,
    post_peak_regression,
    safety_deltas,
)


def test_mean_and_standard_error():
    mean, err = mean_and_stderr([1, 0, 1, 1])
    assert mean == 0.75
    # squared deviations 3·0.0625 + 0.5625 = 0.75; /(n−1) = 0.25; stdev 0.5; / √4
    assert err == pytest.approx(0.25)
    assert mean_and_stderr([1.0]) == (1.0, 0.0)


def test_gap_closed_per_benchmark_and_its_median_leave_out_unmeasurable_gaps():
    base = {"gsm8k": 0.20, "mmlu": 0.40, "arc": 0.50, "ifeval": 0.30, "hellaswag": 0.60}
    instruct = {"gsm8k": 0.60, "mmlu": 0.60, "arc": 0.52, "ifeval": 0.80, "hellaswag": 0.90}
    scores = {"gsm8k": 0.50, "mmlu": 0.45, "arc": 0.90, "ifeval": 0.30, "hellaswag": 0.96,
              "truthfulqa": 0.5}  # fmt: skip
    gap = gap_closed(scores, base, instruct)
    assert gap.per_benchmark == pytest.approx(
        {"gsm8k": 0.75, "mmlu": 0.25, "ifeval": 0.0, "hellaswag": 1.2}
    )
    assert gap.median == pytest.approx((0.25 + 0.75) / 2)
    # arc's gap (0.02) is below the threshold; truthfulqa has no reference scores
    assert gap.excluded == ["arc", "truthfulqa"]
    assert MIN_MEASURABLE_GAP == 0.05


def test_a_negative_gap_still_counts_progress_towards_instruct():
    gap = gap_closed({"x": 0.5}, {"x": 0.8}, {"x": 0.2})
    assert gap.per_benchmark == {"x": pytest.approx(0.5)}


def test_no_measurable_benchmark_means_no_headline():
    gap = gap_closed({"x": 0.5}, {"x": 0.5}, {"x": 0.51})
    assert gap.median is None and gap.excluded == ["x"]


def test_domain_vectors_and_the_pareto_set():
    domains = {"gsm8k": "math", "math": "math", "mmlu": "knowledge", "humaneval": "code"}
    assert domain_vector({"gsm8k": 0.4, "math": 0.2, "mmlu": 0.5}, domains) == pytest.approx(
        {"knowledge": 0.5, "math": 0.3}
    )
    vectors = {
        "c1": {"math": 0.2, "code": 0.1},
        "c2": {"math": 0.5, "code": 0.1},  # dominates c1
        "c3": {"math": 0.3, "code": 0.4},  # better code, worse math than c2
        "c4": {"math": 0.3, "code": 0.4},  # equal to c3: neither dominates
    }
    assert pareto_set(vectors) == ["c2", "c3", "c4"]


def test_post_peak_regression_compares_with_the_best_earlier_checkpoint():
    history = [("c1", 0.30), ("c2", 0.55), ("c3", 0.40), ("c4", 0.70)]
    warning = post_peak_regression(history, "c3")
    assert warning is not None and warning.best == "c2" and warning.drop == pytest.approx(0.15)
    assert post_peak_regression(history, "c4") is None  # the best so far
    assert post_peak_regression(history, "c1") is None  # nothing earlier
    assert post_peak_regression(history, "c3", margin=0.2) is None


def test_safety_deltas_flag_a_model_more_harmful_than_base():
    deltas = {d.benchmark: d for d in safety_deltas(
        {"strongreject": 0.6, "bbq": 0.9, "mask": 0.5},
        {"strongreject": 0.8, "bbq": 0.7, "mask": 0.5, "fortress": 0.4},
    )}  # fmt: skip
    assert deltas["strongreject"].more_harmful and deltas["strongreject"].delta == pytest.approx(
        -0.2
    )
    assert not deltas["bbq"].more_harmful and not deltas["mask"].more_harmful
    assert "fortress" not in deltas  # the model was not scored on it
