import choix
import numpy as np
import pytest

from arena.rating import Battles, fit_ratings, longer_answer_wins, votes_per_pair
from arena.rating import model as rating_model
from arena.rating.synthetic import synthetic_battles


def max_error(result, battles, truth):
    return max(
        abs(result.score_of(m).score - truth.scores[i]) for i, m in enumerate(battles.models)
    )


@pytest.fixture(scope="module")
def style_biased():
    """200,000 battles among 20 models where style sways votes and 4 models are verbose."""
    return synthetic_battles(n_battles=200_000, n_models=20, seed=11, verbose_models=4)


@pytest.fixture(scope="module")
def style_fit(style_biased):
    battles, _ = style_biased
    return fit_ratings(battles, ci="bootstrap", bootstrap_rounds=40, seed=1)


def test_style_controlled_scores_recover_the_truth(style_biased, style_fit):
    battles, truth = style_biased
    assert max_error(style_fit, battles, truth) < 10


def test_true_style_coefficients_lie_within_their_intervals(style_biased, style_fit):
    battles, truth = style_biased
    # The fit reports log-odds per standard deviation of each standardised feature.
    std = battles.style.std(axis=0)
    for name, true_per_unit, sd in zip(
        style_fit.style_coefficients, truth.style_effect, std, strict=True
    ):
        low, high = style_fit.style_intervals[name]
        assert low <= true_per_unit * sd <= high, name


def test_a_raw_fit_overrates_verbose_models_and_style_control_does_not(style_biased, style_fit):
    battles, truth = style_biased
    raw = fit_ratings(battles, style=False, ci=None)
    verbose = battles.models[:4]
    raw_bias = np.mean([raw.score_of(m).score - truth.scores[i] for i, m in enumerate(verbose)])
    controlled_bias = np.mean(
        [style_fit.score_of(m).score - truth.scores[i] for i, m in enumerate(verbose)]
    )
    assert raw_bias > 40
    assert abs(controlled_bias) < 10


def test_without_style_or_ties_scores_agree_with_choix():
    battles, _ = synthetic_battles(n_battles=20_000, n_models=8, seed=5)
    ours = fit_ratings(battles.without_style(), style=False, ci=None, l2=1e-6)
    pairs = [
        (int(a), int(b)) if y == 1.0 else (int(b), int(a))
        for a, b, y in zip(battles.a, battles.b, battles.outcome, strict=True)
    ]
    params = choix.opt_pairwise(
        battles.n_models, pairs, alpha=1e-6 / np.log(10) ** 2
    )  # natural-log units
    theirs = 1000 + 400 * (params - params.mean()) / np.log(10)
    for i, model in enumerate(battles.models):
        assert abs(ours.score_of(model).score - theirs[i]) < 0.5


def test_swapping_every_battles_sides_changes_nothing(style_biased):
    battles, _ = style_biased
    small = Battles(
        battles.models,
        battles.a[:5000],
        battles.b[:5000],
        battles.outcome[:5000],
        battles.style[:5000],
        battles.weight[:5000],
    )
    original = fit_ratings(small, ci="sandwich")
    swapped = fit_ratings(small.swapped(), ci="sandwich")
    for score in original.scores:
        other = swapped.score_of(score.model)
        assert other.score == pytest.approx(score.score, abs=1e-6)
        assert other.ci_low == pytest.approx(score.ci_low, abs=1e-6)
    for name, value in original.style_coefficients.items():
        assert swapped.style_coefficients[name] == pytest.approx(value, abs=1e-9)


def test_all_ties_give_equal_scores():
    battles = Battles.build(
        ["x", "y", "z", "x"], ["y", "z", "x", "z"], ["tie", "tie (bothbad)", "tie", "tie"]
    )
    result = fit_ratings(battles, style=False, ci="sandwich")
    assert [s.score for s in result.scores] == pytest.approx([1000.0] * 3, abs=1e-9)
    assert {s.rank for s in result.scores} == {1}


def test_sandwich_intervals_cover_the_truth_at_about_the_nominal_rate():
    covered = total = 0
    for draw in range(100):
        battles, truth = synthetic_battles(n_battles=3000, n_models=5, seed=1000 + draw)
        result = fit_ratings(battles, ci="sandwich")
        for i, model in enumerate(battles.models):
            score = result.score_of(model)
            covered += score.ci_low <= truth.scores[i] <= score.ci_high
            total += 1
    assert 0.90 <= covered / total <= 0.99


def test_a_rank_is_one_plus_the_number_of_models_surely_above():
    # top beats mid and low 90 times in 100, and they beat bottom as often; mid and low play
    # alike and tie each other, so nothing tells them apart. 90 : 10 is about 380 points,
    # many times the width of any interval here.
    rows = []
    for middle in ("mid", "low"):
        rows += [("top", middle, "model_a")] * 90 + [("top", middle, "model_b")] * 10
        rows += [(middle, "bottom", "model_a")] * 90 + [(middle, "bottom", "model_b")] * 10
    rows += [("mid", "low", "tie")] * 50
    battles = Battles.build(*map(list, zip(*rows, strict=True)))
    result = fit_ratings(battles, style=False, ci="sandwich")
    assert {s.model: s.rank for s in result.scores} == {"top": 1, "mid": 2, "low": 2, "bottom": 4}


def test_bootstrap_superiority_and_win_probabilities_are_consistent(style_fit):
    sup, win = style_fit.superiority, style_fit.win_probability
    np.testing.assert_allclose(sup + sup.T, 1 - np.eye(len(sup)), atol=1e-12)  # no exact ties
    np.testing.assert_allclose(win + win.T, 1.0)
    best, worst = (
        style_fit.models.index(style_fit.scores[0].model),
        style_fit.models.index(style_fit.scores[-1].model),
    )
    assert win[best, worst] > 0.5 and sup[best, worst] > 0.5


def test_the_bootstrap_is_reproducible_from_its_seed(style_biased):
    battles, _ = style_biased
    small = Battles(
        battles.models,
        battles.a[:3000],
        battles.b[:3000],
        battles.outcome[:3000],
        battles.style[:3000],
        battles.weight[:3000],
    )
    one = fit_ratings(small, bootstrap_rounds=20, seed=9)
    two = fit_ratings(small, bootstrap_rounds=20, seed=9)
    other = fit_ratings(small, bootstrap_rounds=20, seed=10)
    assert one.to_json() == two.to_json()
    assert one.to_json() != other.to_json()


def test_a_model_that_only_wins_stays_finite_and_is_flagged():
    battles = Battles.build(
        ["champ", "champ", "a", "b"], ["a", "b", "b", "a"], ["model_a", "model_a", "model_a", "tie"]
    )
    result = fit_ratings(battles, style=False, ci="sandwich")
    assert np.isfinite(result.score_of("champ").score)
    assert any("champ won every battle it played" in w for w in result.warnings)


def test_disconnected_groups_are_flagged():
    battles = Battles.build(["a", "c"], ["b", "d"], ["model_a", "model_b"])
    result = fit_ratings(battles, style=False, ci=None)
    assert any("2 disconnected groups" in w for w in result.warnings)


def test_groups_that_only_ever_beat_other_groups_are_flagged_by_name():
    # A and B always beat C and D; within each pair the votes split evenly. Every model has
    # won and lost, and all met, yet the gap between the pairs has no finite optimum.
    games = [("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")] * 3
    split = [
        ("A", "B", "model_a"),
        ("A", "B", "model_b"),
        ("C", "D", "model_a"),
        ("C", "D", "model_b"),
    ]
    rows = [(x, y, "model_a") for x, y in games] + split
    battles = Battles.build(*map(list, zip(*rows, strict=True)))
    result = fit_ratings(battles, style=False, ci=None)
    assert len(result.warnings) == 1
    assert "{A, B} > {C, D}" in result.warnings[0] and "L2 penalty" in result.warnings[0]
    # One tie across the pairs, or one upset, is enough to make the optimum finite.
    for closing in ("tie", "model_b"):
        closed = Battles.build(*map(list, zip(*rows, ("A", "C", closing), strict=True)))
        assert fit_ratings(closed, style=False, ci=None).warnings == []


def test_a_fit_that_does_not_converge_says_so(monkeypatch):
    battles = Battles.build(["x", "y", "z"], ["y", "z", "x"], ["model_a", "model_a", "tie"])
    hessian_at = rating_model._hessian_at
    monkeypatch.setattr(
        rating_model, "_hessian_at", lambda p, design: -hessian_at(p, design)
    )  # uphill
    result = fit_ratings(battles, style=False, ci=None)
    assert any("did not converge" in w for w in result.warnings)


def test_the_longer_answer_share_and_votes_per_pair():
    battles = Battles.build(
        ["x", "x", "y", "x"],
        ["y", "y", "x", "y"],
        ["model_a", "model_b", "model_a", "tie"],
        style_a=np.array([[100, 0, 0, 0], [100, 0, 0, 0], [50, 0, 0, 0], [10, 0, 0, 0]]),
        style_b=np.array([[10, 0, 0, 0], [10, 0, 0, 0], [50, 0, 0, 0], [90, 0, 0, 0]]),
    )
    effect = longer_answer_wins(battles)
    assert (effect.decisive_with_length_difference, effect.won_by_longer) == (2, 1)
    assert effect.share == 0.5
    assert votes_per_pair(battles) == {("x", "y"): 4}


def test_one_weighted_row_per_pair_and_outcome_is_the_same_raw_fit():
    battles, _ = synthetic_battles(n_battles=20_000, n_models=12, seed=4, tie_share=0.2)
    battles = battles.without_style()
    merged = battles.aggregated()
    assert len(merged.a) <= 12 * 12 * 3 and merged.n_battles == battles.n_battles
    ours = fit_ratings(merged, style=False, ci="sandwich")
    reference = fit_ratings(battles, style=False, ci="sandwich")
    np.testing.assert_allclose(ours.theta, reference.theta, rtol=0, atol=1e-9)
    for mine, theirs in zip(ours.scores, reference.scores, strict=True):
        assert (mine.model, mine.n_battles) == (theirs.model, theirs.n_battles)
        # On the 1000 + 400·r scale: rows summed in another order differ by about 1e-9.
        assert mine.ci_low == pytest.approx(theirs.ci_low, abs=1e-6)
        assert mine.ci_high == pytest.approx(theirs.ci_high, abs=1e-6)
    assert ours.warnings == reference.warnings


def test_merging_rows_keeps_outcomes_other_than_win_tie_and_loss():
    battles = Battles(
        ["a", "b", "c"],
        np.array([0, 0, 1, 0, 2]),
        np.array([1, 1, 2, 1, 0]),
        np.array([0.3, 0.3, 1.0, 0.5, 0.0]),
        None,
        np.array([1.0, 2.0, 1.0, 1.0, 0.5]),
    )
    merged = battles.aggregated()
    assert sorted(zip(merged.a, merged.b, merged.outcome, merged.weight, strict=True)) == [
        (0, 1, 0.3, 3.0),
        (0, 1, 0.5, 1.0),
        (1, 2, 1.0, 1.0),
        (2, 0, 0.0, 0.5),
    ]
