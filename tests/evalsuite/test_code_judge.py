"""The code judge's wire and its reading of the asserts, without running an answer."""

from __future__ import annotations

import math

import pytest

from evalsuite.untrusted.code_judge import WireError, decode, encode, free_names


def _no_reference(value):
    return None


def test_plain_values_travel_as_themselves():
    values = [None, True, 0, -(10**40), 2.5, math.inf, "é\udc80", b"\x00\xff", 1 + 2j,
              [1, [2]], (1, (2,)), {"a": (1, 2), 3: None}, {1, 2}, frozenset({"x"})]  # fmt: skip
    for value in values:
        back = decode(encode(value, _no_reference), lambda tag, body: None)
        assert back == value and type(back) is type(value)


def test_subclasses_travel_as_their_plain_type_and_the_rest_not_at_all():
    class Sly(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    back = decode(encode([Sly(3)], _no_reference), lambda tag, body: None)
    assert back == [3] and type(back[0]) is int and back != [4]
    with pytest.raises(TypeError):
        encode(lambda: 1, _no_reference)


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],
        {"x": 1},
        {"l": 5},
        {"i": "zz"},
        {"s": [{"l": []}]},
        {"d": [[1]]},
        {"b": "!!"},
        {"l": [], "t": []},
        {"h": 1},
    ],  # fmt: skip
)
def test_anything_else_is_a_wire_error(data):
    def refuse(tag, body):
        raise WireError("no references here")

    with pytest.raises(WireError):
        decode(data, refuse)


def test_nesting_is_bounded():
    data = 0
    for _ in range(500):
        data = {"l": [data]}
    with pytest.raises(WireError):
        decode(data, lambda tag, body: None)


def test_the_answers_names_are_what_the_asserts_use_and_do_not_define():
    asserts = (
        "import math\nfrom heapq import nsmallest\nMETADATA = {}\n"
        "def check(candidate):\n    assert candidate(1) == helper(2)\n"
        "    assert all(len(x) for x in [[1]])\n"
        "class Case:\n    expected = other(3)\n"
        "check(entry)\nassert math.isclose(root(2), 1.4, rel_tol=0.1)\n"
    )
    assert free_names(asserts) == {"helper", "other", "entry", "root"}
