"""Two models on their own battles (a targeted round): the gap, its interval, P(A above B),
and an honest refusal when the votes cannot determine them.

Hand-made battles with answers known in closed form: with two models, Bradley–Terry's
maximum likelihood puts P(A beats B) at A's share of the points (a tie counting half), so the
gap is 400·log10(points A / points B); the L2 penalty moves it by far less than 0.05 points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from arena.rating import Battles
from arena.rating.pair import MIN_VOTES_PER_PARAMETER, pair_fit

SHORT, LONG = 100, 300  # tokens


def battles_of(groups):
    """Battles from groups of (count, A's outcome "A"/"B"/"T", A's tokens, B's tokens).

    Within each group A is on side A in every other battle, so every style difference
    appears with both signs equally often when each group's count is even."""
    model_a, model_b, winner, style_a, style_b = [], [], [], [], []
    for count, outcome, tokens_a, tokens_b in groups:
        for i in range(count):
            a_first = i % 2 == 0
            model_a.append("ann" if a_first else "bob")
            model_b.append("bob" if a_first else "ann")
            if outcome == "T":
                winner.append("tie")
            else:
                winner.append("model_a" if (outcome == "A") == a_first else "model_b")
            ann_side, bob_side = [tokens_a, 0, 0, 0], [tokens_b, 0, 0, 0]
            style_a.append(ann_side if a_first else bob_side)
            style_b.append(bob_side if a_first else ann_side)
    return Battles.build(
        model_a, model_b, winner,
        style_a=np.array(style_a, dtype=np.float64), style_b=np.array(style_b, dtype=np.float64),
    )  # fmt: skip


def fit(battles, *, style, **options):
    return pair_fit(battles, model_a="ann", model_b="bob", style=style, **options)


def closed_form_gap(points_a, points_b):
    return 400 * math.log10(points_a / points_b)


def test_the_raw_gap_is_the_closed_form_and_its_interval_holds_it():
    battles = battles_of([(39, "A", SHORT, SHORT), (18, "B", SHORT, SHORT), (8, "T", SHORT, SHORT)])
    raw = fit(battles, style=False)

    assert raw.determined and raw.n_votes == 65
    assert raw.gap == pytest.approx(closed_form_gap(39 + 4, 18 + 4), abs=0.05)  # 116.4 points
    assert raw.score_a == pytest.approx(1000 + raw.gap / 2) and raw.score_b == pytest.approx(
        1000 - raw.gap / 2
    )
    assert raw.a_beats_b == pytest.approx(43 / 65, abs=1e-4)
    low, high = raw.gap_interval
    assert 0 < low < raw.gap < high  # 57 decisive votes, 39 of them for A: A is above
    assert raw.gap_interval == pytest.approx(
        (raw.interval_a[0] - raw.interval_b[1], raw.interval_a[1] - raw.interval_b[0])
    )
    assert raw.a_above_b > 0.975
    assert raw.verdict == "ann above bob (95% interval of the gap above 0)"


def test_the_bootstrap_is_seeded():
    battles = battles_of([(30, "A", SHORT, SHORT), (25, "B", SHORT, SHORT), (5, "T", SHORT, SHORT)])
    first, again = fit(battles, style=False, seed=4), fit(battles, style=False, seed=4)
    other = fit(battles, style=False, seed=5)
    assert first.gap_interval == again.gap_interval and first.a_above_b == again.a_above_b
    assert first.gap_interval != other.gap_interval


def test_a_close_round_is_a_tie():
    battles = battles_of([(30, "A", SHORT, SHORT), (27, "B", SHORT, SHORT), (8, "T", SHORT, SHORT)])
    raw = fit(battles, style=False)
    assert raw.gap == pytest.approx(closed_form_gap(34, 31), abs=0.05)
    assert raw.gap_interval[0] < 0 < raw.gap_interval[1]
    assert 0.5 < raw.a_above_b < 0.975
    assert raw.verdict == "a tie: the 95% interval of the gap includes 0"


def test_a_lead_that_is_all_length_is_a_tie_under_style_control():
    # A writes the longer answer in 112 of 160 battles, and voters pick the longer answer
    # three times in four whoever wrote it. Raw, A wins 96 to 64; under style control both
    # groups are fitted exactly by a gap of 0 and one length coefficient.
    battles = battles_of([
        (84, "A", LONG, SHORT), (28, "B", LONG, SHORT),  # A longer: the longer wins 84 of 112
        (36, "B", SHORT, LONG), (12, "A", SHORT, LONG),  # B longer: the longer wins 36 of 48
    ])  # fmt: skip
    raw, styled = fit(battles, style=False), fit(battles, style=True)

    assert raw.gap == pytest.approx(closed_form_gap(96, 64), abs=0.05)  # 70.4 points
    assert raw.verdict.startswith("ann above bob")
    assert styled.determined
    assert styled.gap == pytest.approx(0.0, abs=0.05)
    assert styled.verdict == "a tie: the 95% interval of the gap includes 0"
    assert 0.3 < styled.a_above_b < 0.7
    # The length feature is ±200/401 with mean 0, so ±1 standardised: logit(3/4) = ln 3.
    assert styled.style_coefficients["length"] == pytest.approx(math.log(3), abs=1e-3)
    assert styled.variance_inflation == pytest.approx(1 / (1 - (64 / 160) ** 2), abs=1e-6)


def test_style_that_always_moves_with_the_model_is_not_separated_from_it():
    # A's answers are always the longer: "voters like A" and "voters like length" fit alike.
    battles = battles_of([(39, "A", LONG, SHORT), (18, "B", LONG, SHORT), (8, "T", LONG, SHORT)])
    raw, styled = fit(battles, style=False), fit(battles, style=True)

    assert raw.determined and raw.gap == pytest.approx(closed_form_gap(43, 22), abs=0.05)
    assert not styled.determined
    assert styled.gap is None and styled.gap_interval is None and styled.a_above_b is None
    assert "style moved with the model (length (correlation +1.00))" in styled.reason
    assert styled.verdict.startswith("not determined: ")
    assert styled.variance_inflation > 1000  # centring the odd count's lengths leaves a trace

    # With every difference in both signs equally often, the model column is in the span.
    even = fit(battles_of([(40, "A", LONG, SHORT), (20, "B", LONG, SHORT)]), style=True)
    assert not even.determined and even.variance_inflation == math.inf
    assert even.to_json()["variance_inflation"] is None  # JSON has no infinity


def test_votes_that_style_alone_decides_put_no_bound_on_the_gap():
    # The longer answer won every battle, and each model wrote it half the time.
    battles = battles_of([
        (20, "A", LONG, SHORT), (20, "B", SHORT, LONG), (20, "A", LONG, SHORT),
    ])  # fmt: skip
    styled = fit(battles, style=True)
    assert not styled.determined
    assert "style features (length) alone separate wins from losses" in styled.reason
    assert fit(battles, style=False).determined  # 40 to 20 is a finite raw gap


def test_a_side_that_won_every_battle_has_no_finite_gap():
    battles = battles_of([(25, "A", SHORT, SHORT)])
    raw = fit(battles, style=False)
    assert not raw.determined
    assert raw.reason == "ann won every battle, none tied: the votes put no bound on the gap"


def test_too_few_votes_for_the_parameters_are_refused_not_fitted():
    few = battles_of([(5, "A", SHORT, SHORT), (4, "B", SHORT, SHORT)])
    assert fit(few, style=False).reason == "too few votes: 9 of the 10 needed to fit the gap"

    # Enough for a gap, not for a gap and a length coefficient.
    some = battles_of([(6, "A", LONG, SHORT), (6, "B", SHORT, LONG), (4, "A", SHORT, LONG)])
    assert fit(some, style=False).determined
    styled = fit(some, style=True)
    assert styled.reason == (
        f"too few votes: 16 of the {2 * MIN_VOTES_PER_PARAMETER} needed to fit the gap and "
        "1 style coefficient"
    )
    assert fit(None, style=True).reason == "no counted votes yet"


def test_style_that_never_varies_leaves_the_style_controlled_fit_at_the_raw_one():
    battles = battles_of([(39, "A", SHORT, SHORT), (18, "B", SHORT, SHORT), (8, "T", SHORT, SHORT)])
    raw, styled = fit(battles, style=False), fit(battles, style=True)
    assert styled.determined
    assert styled.gap == pytest.approx(raw.gap, abs=1e-6)
    assert styled.notes == ["the answers' style did not vary: style control changes nothing"]
