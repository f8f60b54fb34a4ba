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


def test_groups_are_decided_oldest_first_and_repeat_exactly():
    # Stars depend on which prompt came first (it is the representative): the command feeds
    # prompts oldest first, so the same battles always give the same groups.
    prompts = [f"{QUESTION} {i}" for i in range(5)] + [
        f"Tell me a fact about the number {i * 7919}" for i in range(5)
    ]
    first = near_duplicate_groups(prompts, len(prompts))
    np.testing.assert_array_equal(first, near_duplicate_groups(prompts, len(prompts)))
    assert first[:5].tolist() == [0] * 5  # near copies of the first question
    assert not set(first[:5]) & set(first[5:])


def test_each_battle_of_a_group_of_g_weighs_one_over_root_g_and_a_singleton_one():
    groups = np.array([7] * 50 + list(range(100, 110)))
    weights = group_weights(groups)
    # 50 copies weigh 50/√50 = √50 ≈ 7.07 battles' worth: less than the 10 distinct prompts,
    # which keep weight 1 each (no rescaling upward): 7.07 + 10 = 17.07 in all.
    np.testing.assert_allclose(weights[:50], 1 / np.sqrt(50))
    np.testing.assert_allclose(weights[50:], 1.0)
    assert weights.sum() == pytest.approx(np.sqrt(50) + 10)
    summary = dedup_summary(groups, "database")
    assert summary["battles_grouped"] == 50 and summary["groups_of_several"] == 1
    assert summary["largest_group"] == 50
    assert summary["grouped_share_of_battles"] == pytest.approx(50 / 60, abs=1e-4)
    assert summary["grouped_share_of_fit"] == pytest.approx(
        np.sqrt(50) / (np.sqrt(50) + 10), abs=1e-4
    )
    assert summary["rule"].startswith("1/sqrt(group size)")


def test_no_battle_weighs_more_than_one_however_many_duplicates_surround_it():
    # The old rule rescaled the weights to sum to n: an attacker's unique prompts among many
    # duplicates then weighed more than 1 each (9 % of the battles, 31 % of the fit).
    groups = np.array([0] * 500 + [1] * 300 + list(range(2, 82)))
    weights = group_weights(groups)
    assert weights.max() == pytest.approx(1.0)
    np.testing.assert_allclose(weights[800:], 1.0)
    unique_share = weights[800:].sum() / weights.sum()
    assert unique_share == pytest.approx(80 / (80 + np.sqrt(500) + np.sqrt(300)))
    np.testing.assert_allclose(group_weights(np.arange(5)), 1.0)


def test_templated_distinct_questions_are_not_one_group():
    # Single-linkage over band collisions made 837 of these 1,000 one group.
    places = [f"place number {i} called {chr(65 + i % 26)}{i * 7919 % 10007}" for i in range(300)]
    prompts = [f"What is the capital of {place}?" for place in places]
    groups = near_duplicate_groups(prompts, len(prompts))
    sizes = np.bincount(groups)
    assert sizes.max() <= 30


def test_a_chain_of_small_morphs_does_not_join_two_unrelated_prompts():
    start = "the quick brown fox jumps over the lazy dog near the river bank"
    end = "a slow green turtle walks under the tall tree by the mountain lake"
    chain = [start]
    current = list(start.ljust(len(end)))
    for i, letter in enumerate(end):  # one character at a time from start to end
        current[i] = letter
        chain.append("".join(current))
    groups = near_duplicate_groups(chain, len(chain))
    assert groups[0] != groups[-1]
    # Each group's members are near its first prompt, not merely near a neighbour.
    assert len(set(groups.tolist())) >= 3


def test_the_count_given_must_be_the_number_of_prompts():
    with pytest.raises(ValueError):
        near_duplicate_groups(["a", "b"], 3)
    with pytest.raises(ValueError):
        near_duplicate_groups(["a", "b", "c"], 2)
