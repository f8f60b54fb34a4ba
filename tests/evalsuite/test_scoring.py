"""The rule-based graders on hand-written answers."""

from evalsuite.scoring import (
    choice_correct,
    code_correct,
    exact_correct,
    includes_correct,
)


def test_exact_takes_the_answer_line_or_the_last_number():
    assert exact_correct("7 trays of 12 is 84, minus 50.\nANSWER: 34", "34")
    assert exact_correct("So there are 1,210 dollars", "1210")
    assert not exact_correct("ANSWER: 35", "34")
    assert not exact_correct("I do not know", "34")
    assert exact_correct("The first one is Apple.", "apple")
    assert exact_correct("ANSWER: Friday", "Friday") and not exact_correct("Monday", "Friday")


def test_choice_reads_the_committed_letter():
    assert choice_correct("Nitrogen is most of it.\nANSWER: B", "B", 4)
    assert choice_correct("(B) Nitrogen", "B", 4)
    assert not choice_correct("ANSWER: C", "B", 4)
    assert not choice_correct("ANSWER: E", "E", 4)  # not one of the offered letters
    assert not choice_correct("Because of air", "B", 4)


def test_includes_finds_the_target_as_a_whole_word():
    assert includes_correct("The river finally reaches the lake.", "lake")
    assert not includes_correct("It reaches the lakeside town.", "lake")


def test_code_runs_the_answer_against_the_asserts():
    asserts = "assert add_numbers(2, 3) == 5"
    good = "Here:\n```python\ndef add_numbers(a, b):\n    return a + b\n```"
    assert code_correct(good, asserts)
    assert not code_correct("```python\ndef add_numbers(a, b):\n    return a - b\n```", asserts)
    assert not code_correct("def add_numbers(a, b) return", asserts)  # a syntax error
    assert not code_correct("def add_numbers(a, b):\n    while True: pass", asserts, timeout_s=1)
