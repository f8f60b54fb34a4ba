"""The rule-based category tags of a prompt, and the rules' bounds on hostile prompts."""

import time

import pytest

from arena.battles.categories import (
    HARD_CRITERIA,
    LONG_QUERY_TOKENS,
    RuleCategorizer,
    categories_decode,
    categories_encode,
    is_hard,
)

RULES = RuleCategorizer()


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Write a Python function that reverses a linked list.", {"coding"}),
        ("Why does my code throw a NullPointerException in Java?", {"coding"}),
        ("Fix this:\n```\nfor i in range(10) print(i)\n```", {"coding"}),
        ("What does `arr.map(x => x * 2)` return?", {"coding"}),
        ("Solve 2x + 3 = 7 for x.", {"math"}),
        ("What is the integral of x^2 from 0 to 1?", {"math"}),
        (r"Simplify $\frac{a^2 - b^2}{a - b}$ please.", {"math"}),
        ("Write a haiku about autumn rain.", {"creative_writing"}),
        ("Compose a short story about a lighthouse keeper and a whale.", {"creative_writing"}),
        ("Explain photosynthesis in exactly 3 sentences.", {"instruction_following"}),
        ("List three fruits and answer in JSON format.", {"instruction_following"}),
        ("Describe Paris and do not use commas.", {"instruction_following"}),
        ("Quelle est la capitale de la France et pourquoi est-elle importante ?", set()),
        ("Tell me about the history of Rome.", set()),
        ("What is the best way to learn the guitar as an adult?", set()),
        ("hi", set()),
    ],
)
def test_rules_tag_what_a_reader_would(prompt, expected):
    assert set(RULES.categorize(prompt).tags) - {"non_english"} == expected


def test_a_prompt_in_another_language_is_non_english_and_says_which():
    french = RULES.categorize(
        "Quelle est la capitale de la France et pourquoi est-elle importante ?"
    )
    chinese = RULES.categorize("这个问题应该怎么解决才好呢")
    english = RULES.categorize("What is the capital of France and why does it matter?")
    assert (french.language, "non_english" in french.tags) == ("fr", True)
    assert chinese.language.startswith("zh") and "non_english" in chinese.tags
    assert (english.language, "non_english" in english.tags) == ("en", False)


def test_a_prompt_too_short_or_too_unsure_to_place_is_not_called_non_english():
    # langdetect leans Finnish on this English line (57 %): unsure calls stay unknown.
    for prompt in ("hi", "ok??", "Write a haiku about autumn rain.", "1234 + 5678"):
        assert "non_english" not in RULES.categorize(prompt).tags


def test_a_long_query_is_one_of_at_least_500_tokens():
    words = "word " * (LONG_QUERY_TOKENS - 1)
    assert "long_query" not in RULES.categorize(words).tags
    assert "long_query" in RULES.categorize(words + "more").tags


def test_a_battle_is_multi_turn_from_its_second_user_turn():
    assert "multi_turn" not in RULES.categorize("Tell me about Rome.").tags
    assert "multi_turn" not in RULES.categorize("Tell me about Rome.", user_turns=1).tags
    assert "multi_turn" in RULES.categorize("Tell me about Rome.", user_turns=2).tags


def test_rules_never_call_a_prompt_hard_a_judge_does_with_six_of_seven_criteria():
    hard_looking = "Design a lock-free MPMC queue in C++ with formal proofs of linearizability."
    assert "hard" not in RULES.categorize(hard_looking).tags
    six = dict.fromkeys(HARD_CRITERIA, True) | {"creativity": False}
    five = six | {"real_world": False}
    assert is_hard(six) and not is_hard(five)


def test_tags_are_stored_so_one_category_is_a_plain_substring():
    stored = categories_encode({"math", "coding"})
    assert stored == ",coding,math,"
    assert ",math," in stored and ",coding," in stored and ",hard," not in stored
    assert categories_decode(stored) == ["coding", "math"]
    assert categories_encode(set()) == "" and categories_decode("") == []


@pytest.mark.parametrize(
    "hostile",
    [
        "`" * 200_000,
        "$" * 200_000,
        "\\frac" * 50_000,
        "write " * 50_000,
        "```\n" * 50_000,
        "`" + "." * 200_000,  # took 8.6 s with one pattern for inline code (quadratic)
        "`." * 100_000,
        "a=" + "b(" * 100_000,
    ],
)
def test_hostile_prompts_are_read_in_bounded_pieces(hostile):
    # Every rule reads a bounded prefix, and a huge prompt is a long query however its
    # tokens are spelled.
    assert "long_query" in RULES.categorize(hostile).tags


@pytest.mark.parametrize("unit", ["`" + ".", "a=" + "b(", "write ", "$x"])
def test_the_rules_cost_grows_linearly_with_the_prompt(unit):
    # Eight times the text must cost well under 64 times the time (what a quadratic pattern
    # costs: one pattern for inline code took 8.6 s on "`" + 30,000 dots). The repeated
    # unit's first characters start the text once; the rest repeats its tail.
    def cpu(length: int) -> float:
        text = unit + unit[-1] * length
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            RULES.categorize(text)
            best = min(best, time.process_time() - started)
        return max(best, 1e-4)

    assert cpu(16_000) < 32 * cpu(2_000)


@pytest.mark.parametrize("unit", ["\n", "\t \n", " ", "public\n", "1 +\n"])
def test_whitespace_runs_cost_linear_time_at_any_length(unit):
    # A prompt of mostly newlines once cost quadratic time: `^\s*` under MULTILINE let every
    # line start scan all the blank lines after it (0.6 s for "x" + 1,998 newlines + "x",
    # 20 s for "\t \n" * 7,000). Eight times the blank text must cost well under 64 times.
    def cpu(repeats: int) -> float:
        text = "x" + unit * repeats + "x"
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            RULES.categorize(text)
            best = min(best, time.process_time() - started)
        return max(best, 1e-4)

    short_units = 2_000 // len(unit)
    assert cpu(8 * short_units) < 24 * cpu(short_units)
