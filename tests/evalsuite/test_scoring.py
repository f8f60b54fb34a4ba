"""The rule-based graders on hand-written answers."""

from evalsuite.scoring import code_correct, exact_correct


def test_exact_takes_the_answer_line_or_the_last_number():
    assert exact_correct("7 trays of 12 is 84, minus 50.\nANSWER: 34", "34")
    assert exact_correct("So there are 1,210 dollars", "1210")
    assert not exact_correct("ANSWER: 35", "34")
    assert not exact_correct("I do not know", "34")
    assert exact_correct("The first one is Apple.", "apple")
    assert exact_correct("ANSWER: Friday", "Friday") and not exact_correct("Monday", "Friday")


def test_code_runs_the_answer_against_the_asserts():
    asserts = "assert add_numbers(2, 3) == 5"
    good = "Here:\n```python\ndef add_numbers(a, b):\n    return a + b\n```"
    assert code_correct(good, asserts)
    assert not code_correct("```python\ndef add_numbers(a, b):\n    return a - b\n```", asserts)
    assert not code_correct("def add_numbers(a, b) return", asserts)  # a syntax error
    assert not code_correct("def add_numbers(a, b):\n    while True: pass", asserts, timeout_s=1)


def _code(body: str) -> str:
    return f"```python\n{body}\n```"


def test_code_answers_of_every_shape_the_sets_use_still_pass():
    """The asserts run in the judge's process and the answer's values come back as plain data:
    dict and tuple subclasses, big integers, floats, exceptions, generators and the answer's own
    objects must still compare as they would in one process."""
    answer = _code(
        "import collections, math\n"
        "def tally(s):\n    return collections.Counter(s)\n"
        "def pairs(xs):\n    return tuple(zip(xs, xs[1:]))\n"
        "def first_upper(s):\n    return next((c for c in s if c.isupper()), None)\n"
        "def fact(n):\n    return math.factorial(n)\n"
        "def root(x):\n    return math.sqrt(x)\n"
        "def checked(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
        "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n"
        "def unique(xs):\n    return set(xs)\n"
        "def shout(text, *, times=1):\n    return text.upper() * times\n"
        "def raw(s):\n    return s.encode()\n"
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def chain(pairs, n):\n    return sum(1 for p in pairs[:n] if p.a < p.b)\n"
        "print('the answer may print')\n"
        "if __name__ == '__main__':\n    pass\n"
    )
    asserts = "\n".join(
        [
            "import math",
            "assert tally('abca') == {'a': 2, 'b': 1, 'c': 1}",
            "assert pairs([1, 2, 3]) == ((1, 2), (2, 3))",
            "assert first_upper('abc') is None and first_upper('aBc') == 'B'",
            "assert fact(300) == math.factorial(300)",
            "assert math.isclose(root(2), 1.41421356, rel_tol=1e-6)",
            "try:\n    checked(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",
            "assert list(evens(7)) == [0, 2, 4, 6]",
            "assert unique([1, 1, 2]) == {1, 2}",
            "assert shout('hi', times=2) == 'HIHI'",
            "assert raw('é') == b'\\xc3\\xa9'",
            "assert chain([Pair(5, 24), Pair(30, 25), Pair(27, 40)], 3) == 2",
            "def check(candidate):\n    assert candidate(3) == 3\n    assert candidate(0) == 0",
            "check(checked)",
        ]
    )
    assert code_correct(answer, asserts)
    assert not code_correct(answer.replace("x < 0", "x < -5"), asserts)
    assert not code_correct(answer.replace("== 0)", "== 1)"), asserts)
    assert not code_correct(answer.replace("return x\n", "return x + 1\n"), asserts)


def test_code_fails_what_the_answer_does_not_define_or_cannot_load():
    asserts = "assert add_numbers(2, 3) == 5"
    assert not code_correct(_code("def other(a, b):\n    return a + b"), asserts)
    assert not code_correct(
        _code("def add_numbers(a, b):\n    return a + b\nraise ValueError"), asserts
    )
    assert not code_correct(_code("def add_numbers(a, b):\n    return [a] * 10**8"), asserts)
