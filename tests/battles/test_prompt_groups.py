"""Near-duplicate prompts: which are grouped, and what each group's battles weigh."""

import numpy as np
import pytest

from arena.battles.prompt_groups import (
    dedup_summary,
    group_weights,
    near_duplicate_groups,
    normalise,
    prompt_key,
)

QUESTION = (
    "Explain the difference between a process and a thread in an operating system, with an "
    "example of when you would choose each one"
)


def test_prompts_differing_in_case_spacing_punctuation_or_unicode_form_share_a_key():
    same = ["What is the capital of France?", "what is the capital of france", " WHAT is the  "
            "capital of France??", "Ｗｈａｔ is the capital of France"]  # fmt: skip
    assert {prompt_key(p) for p in same} == {prompt_key(same[0])}
    assert prompt_key("What is the capital of Spain?") != prompt_key(same[0])
    assert normalise("Hi!!  there_") == "hi there"
    assert 0 <= prompt_key(QUESTION) < 2**52  # exact in a float64


def test_near_duplicates_are_grouped_and_different_prompts_are_not():
    prompts = [
        QUESTION,
        QUESTION + "?",
        QUESTION.replace("an example", "one example") + ", please",
        QUESTION + " (asked again, 2nd time)",
        "Write a haiku about autumn rain.",
        "Explain the difference between TCP and UDP, with an example of when to use each",
        "hi",
        "Hi!",
    ]
    groups = near_duplicate_groups(prompts, len(prompts))
    assert groups.tolist() == [0, 0, 0, 0, 1, 2, 3, 3]


def test_groups_do_not_depend_on_the_order_of_the_prompts():
    prompts = [f"{QUESTION} {i}" for i in range(5)] + [
        f"Tell me a fact about the number {i * 7919}" for i in range(5)
    ]
    forward = near_duplicate_groups(prompts, len(prompts))
    backward = near_duplicate_groups(prompts[::-1], len(prompts))[::-1]
    same_group = forward[:, None] == forward[None, :]
    np.testing.assert_array_equal(same_group, backward[:, None] == backward[None, :])


def test_each_battle_of_a_group_of_g_weighs_in_proportion_to_one_over_root_g():
    groups = np.array([7] * 50 + list(range(100, 110)))
    weights = group_weights(groups)
    # 50 copies weigh as much as √50 ≈ 7.07 distinct prompts: less than the 10 here.
    assert weights[:50].sum() / weights[50:].sum() == pytest.approx(np.sqrt(50) / 10)
    np.testing.assert_allclose(weights[:50], weights[0])
    np.testing.assert_allclose(weights[50:], weights[50])
    assert weights.sum() == pytest.approx(60)  # as many battles' worth as there are battles
    summary = dedup_summary(groups, "database")
    assert summary["battles_grouped"] == 50 and summary["groups_of_several"] == 1
    assert summary["largest_group"] == 50
    assert summary["grouped_share_of_battles"] == pytest.approx(50 / 60, abs=1e-4)
    assert summary["grouped_share_of_fit"] == pytest.approx(
        np.sqrt(50) / (np.sqrt(50) + 10), abs=1e-4
    )
    assert summary["rule"].startswith("1/sqrt(group size)")


def test_prompts_asked_equally_often_keep_weight_one():
    np.testing.assert_allclose(group_weights(np.array([3] * 40)), 1.0)
    np.testing.assert_allclose(group_weights(np.repeat(np.arange(12), 8)), 1.0)
    np.testing.assert_allclose(group_weights(np.arange(5)), 1.0)


def test_the_count_given_must_be_the_number_of_prompts():
    with pytest.raises(ValueError):
        near_duplicate_groups(["a", "b"], 3)
    with pytest.raises(ValueError):
        near_duplicate_groups(["a", "b", "c"], 2)
