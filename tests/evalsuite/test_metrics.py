"""Metrics on hand-made numbers: every comparison asks whether a difference is larger than
its own standard error."""

import math

import pytest
from inspect_ai.scorer import SampleScore, stderr
from inspect_ai.scorer import Score as InspectScore

from evalsuite.metrics import (
    MEASURABLE_Z,
    NO_QUALIFYING,
    Score,
    difference_stderr,
    domain_vector,
    gap_closed,
    headline,
    headline_draws,
    mean_and_stderr,
    measurable,
    pareto_set,
    post_peak_regression,
    safety_deltas,
)


def s(value: float, stderr: float | None = 0.01, n: int = 100) -> Score:
    return Score(value, stderr, n)


def items(values: list[float]) -> Score:
    """A score with its per-item values (items "0", "1", ...), as the runner stores them."""
    mean, err = mean_and_stderr(values)
    return Score(mean, err, len(values), tuple((str(i), float(v)) for i, v in enumerate(values)))


def plain(score: Score) -> Score:
    """The same score without its per-item values."""
    return Score(score.value, score.stderr, score.n)


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


def test_a_negative_gap_is_left_out_with_its_reason():
    # instruct 0.2 below base 0.8: an agent at 0.5 got worse, not 50 % of the way to instruct
    gap = gap_closed({"x": s(0.5)}, {"x": s(0.8)}, {"x": s(0.2)})
    assert gap.per_benchmark == {} and gap.median is None
    assert gap.reasons == {"x": "instruct not above base: 0.200 vs 0.800"}
    assert gap.why_none == NO_QUALIFYING == "no benchmark where instruct beats base"


def test_the_demo_winogrande_case_is_no_headline_not_plus_one():
    # The demo's references on 5 items: base 3 right (0.600 ± 0.245), instruct and the agent
    # none. Two-sided, |0 − 0.6| > 1.96 · 0.245 = 0.480 counted it: (0 − 0.6) / (0 − 0.6) = +1.
    base = {"winogrande": items([1, 1, 1, 0, 0])}
    instruct = {"winogrande": items([0, 0, 0, 0, 0])}
    agent = {"winogrande": items([0, 0, 0, 0, 0])}
    assert base["winogrande"].stderr == pytest.approx(0.245, abs=5e-4)
    gap = gap_closed(agent, base, instruct)
    assert gap.median is None and gap.per_benchmark == {}
    assert gap.reasons == {"winogrande": "instruct not above base: 0.000 vs 0.600"}
    assert headline(agent, base, instruct) is None


def test_a_gap_within_the_noise_is_left_out_with_its_reason():
    # 0.52 − 0.50 = 0.02 above, but 1.96 · √2 · 0.01 = 0.028; unknown errors cannot measure
    gap = gap_closed({"arc": s(0.9), "x": s(0.5), "y": s(0.5)},
                     {"arc": s(0.50), "x": s(0.2, None)}, {"arc": s(0.52), "x": s(0.6)})  # fmt: skip
    assert gap.reasons == {
        "arc": "instruct − base within 1.96·se (0.028): 0.520 vs 0.500",
        "x": "reference standard error unknown: 0.600 vs 0.200",
        "y": "no base or instruct score",
    }


def test_a_positive_gap_counts_and_a_model_worse_than_the_base_gets_a_negative_gap_closed():
    base, instruct = {"gsm8k": s(0.2)}, {"gsm8k": s(0.6)}
    assert gap_closed({"gsm8k": s(0.5)}, base, instruct).per_benchmark == {
        "gsm8k": pytest.approx(0.75)
    }
    worse = headline({"gsm8k": s(0.1)}, base, instruct)
    assert worse.value == pytest.approx((0.1 - 0.2) / 0.4)  # −0.25


def test_no_measurable_benchmark_means_no_headline_gap():
    gap = gap_closed({"x": s(0.5)}, {"x": s(0.5)}, {"x": s(0.51)})
    assert gap.median is None and gap.excluded == ["x"]


def test_the_headline_carries_a_standard_error_from_the_model_and_the_references():
    def one(ref_se: float) -> float:
        base, instruct = {"a": s(0.2, ref_se)}, {"a": s(0.6, ref_se)}
        return headline({"a": s(0.4, 0.02)}, base, instruct).stderr

    # g = (x − b) / (i − b) at x 0.4, b 0.2, i 0.6: ∂g/∂x = 2.5, ∂g/∂b = ∂g/∂i = −1.25, so
    # se = √((2.5 · 0.02)² + 2 · (1.25 · se_ref)²): 0.050 with exact references, 0.053 at 0.01.
    # 2,000 draws estimate an interval's width to about 2.5 %: hence rel=0.08.
    assert one(0.0) == pytest.approx(0.05, rel=0.08)
    assert one(0.01) == pytest.approx(math.sqrt(0.05**2 + 2 * 0.0125**2), rel=0.08)
    assert one(0.03) == pytest.approx(math.sqrt(0.05**2 + 2 * 0.0375**2), rel=0.08)
    assert one(0.0) < one(0.01) < one(0.03)
    assert one(0.03) == one(0.03)  # seeded: the same interval every time
    base, instruct = {"a": s(0.2), "b": s(0.2)}, {"a": s(0.6), "b": s(0.6)}
    # No benchmark with references: no headline, and no mean score in its place
    assert headline({"c": s(0.3, 0.03), "d": s(0.5, 0.04)}, base, instruct) is None
    assert headline({"a": s(0.4, None)}, base, instruct).stderr is None
    assert headline({}, base, instruct) is None


def test_per_item_scores_are_redrawn_together_over_the_items_all_three_answered():
    # Per item the model answers exactly as instruct does: every paired redraw closes the gap
    # exactly, se 0. Drawn as independent normals from the same standard errors it would be
    # far from 0.
    base = [0, 1, 0, 0, 1, 0, 0, 0]
    instruct = [1, 1, 0, 1, 1, 1, 0, 1]
    paired = headline({"g": items(instruct)}, {"g": items(base)}, {"g": items(instruct)})
    assert paired.value == pytest.approx(1.0) and paired.stderr == 0.0
    unpaired = headline({"g": plain(items(instruct))}, {"g": plain(items(base))},
                        {"g": plain(items(instruct))})  # fmt: skip
    assert unpaired.stderr > 0.2


def test_models_against_the_same_references_share_their_draws():
    base, instruct = {"a": s(0.2, 0.05)}, {"a": s(0.6, 0.05)}
    # Two checkpoints with the same exact scores: each headline is noisy (the references'),
    # but draw by draw they are equal, so a drop between them has no noise at all.
    one = headline_draws({"a": s(0.5, 0.0)}, base, instruct, model_key="1")
    two = headline_draws({"a": s(0.5, 0.0)}, base, instruct, model_key="2")
    assert one.score.stderr > 0.05
    assert (one.draws == two.draws).all()
    history = [("1", s(0.75, one.score.stderr)), ("2", s(0.5, one.score.stderr))]
    # a 0.25 drop: within 1.96 · √2 · se (0.27) alone, measurable once the shared draws cancel
    assert post_peak_regression(history, "2") is None
    paired = post_peak_regression(history, "2", draws={"1": one.draws, "2": two.draws})
    assert paired is not None and paired.drop_stderr == 0.0


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
