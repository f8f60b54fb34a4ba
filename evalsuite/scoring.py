"""Rule-based graders, as pure functions of (answer text, target): one per `Scorer` kind
except "judge", which asks a model (see `tasks.py`). They are deliberately lenient about
format (an "ANSWER:" line is preferred, the last number or leading letter is accepted) so a
small model that answers right but untidily is not scored as wrong."""

from __future__ import annotations

import re

from inspect_evals.humaneval.humaneval import find_code as humaneval_code
from inspect_evals.mbpp.mbpp import find_code as mbpp_code

from evalsuite import untrusted

CODE_TIMEOUT_S = 10.0

_ANSWER_LINE = re.compile(r"ANSWER\s*[:：]\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str) -> str:
    """What the answer commits to: the text after the last "ANSWER:", else the whole text."""
    found = _ANSWER_LINE.findall(text)
    return (found[-1] if found else text).strip()


def _number(text: str) -> float | None:
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    try:
        return float(numbers[-1].replace(",", ""))
    except ValueError:
        return None


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def exact_correct(text: str, target: str) -> bool:
    """Numeric targets: the last number equals it. Others: the committed answer (or its last
    word) equals the target, ignoring case and punctuation."""
    answer = final_answer(text)
    expected = _number(target) if _NUMBER.fullmatch(target.strip()) else None
    if expected is not None:
        return _number(answer) == expected
    normal = _normal(answer)
    return normal == _normal(target) or normal.split(" ")[-1:] == [_normal(target)]


def code_correct(
    text: str,
    asserts: str,
    *,
    prompt: str = "",
    entry_point: str = "",
    timeout_s: float = CODE_TIMEOUT_S,
) -> bool:
    """Load the answer's code and run the asserts against its functions; correct when every
    assert ran to the end within the time limit.

    The program is what inspect_evals runs: with an `entry_point` (HumanEval) the prompt, then
    the code its `find_code` takes from the answer (the function's body, when fenced); else
    (MBPP) the code its MBPP `find_code` takes. The verdict is not the program's exit status,
    which an answer forges: `untrusted.run_python` runs the program as an unprivileged user
    with an empty environment, no network, rlimits, a private folder, capped output, and every
    process it started killed after, and the asserts run in the judge's process
    (`untrusted/code_judge.py`) after the prompt (its imports and helpers are the benchmark's
    there), calling the answer's functions (the entry point, the names the asserts do not
    define) and comparing what comes back, as plain data, so the answer can neither read them
    nor forge the verdict."""
    if entry_point:
        program = prompt + humaneval_code(text)
        outcome = untrusted.run_python(
            program,
            timeout_s=timeout_s,
            asserts=asserts,
            setup=prompt,
            answer_names=(entry_point,),
        )
    else:
        outcome = untrusted.run_python(mbpp_code(text), timeout_s=timeout_s, asserts=asserts)
    return outcome.passed is True
