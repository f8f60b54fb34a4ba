"""Rule-based graders, as pure functions of (answer text, target): one per `Scorer` kind
except "judge", which asks a model (see `tasks.py`). They are deliberately lenient about
format (an "ANSWER:" line is preferred, the last number or leading letter is accepted) so a
small model that answers right but untidily is not scored as wrong."""

from __future__ import annotations

import re
import secrets

from evalsuite import untrusted
from evalsuite.registry import CHOICE_LETTERS

CODE_TIMEOUT_S = 10.0

_ANSWER_LINE = re.compile(r"ANSWER\s*[:：]\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


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


def chosen_letter(text: str, n_choices: int) -> str | None:
    letters = CHOICE_LETTERS[:n_choices]
    answer = final_answer(text)
    found = re.match(rf"^\W*\(?([{letters}])\b", answer)
    return found.group(1) if found else None


def choice_correct(text: str, target: str, n_choices: int) -> bool:
    return chosen_letter(text, n_choices) == target


def includes_correct(text: str, target: str) -> bool:
    return re.search(rf"\b{re.escape(_normal(target))}\b", _normal(text)) is not None


def extract_code(text: str) -> str:
    blocks = _CODE_BLOCK.findall(text)
    return max(blocks, key=len) if blocks else text


def code_correct(text: str, asserts: str, *, timeout_s: float = CODE_TIMEOUT_S) -> bool:
    """Run the answer's code and then the asserts in a fresh interpreter; correct when it
    reaches the end (a line only the harness knows, printed after the asserts) and exits 0.

    This executes model output, which the agent chooses: `untrusted.run_python` runs it as an
    unprivileged user with an empty environment, rlimits, a private folder, capped output, and
    every process it started killed after. Exiting 0 before the asserts is not correct.
    """
    done_line = f"asserts-passed-{secrets.token_hex(16)}"
    ending = f"print('\\n' + {done_line!r}, flush=True)"
    program = f"{extract_code(text)}\n\n{asserts}\n\n{ending}\n"
    outcome = untrusted.run_python(program, timeout_s=timeout_s)
    return (
        outcome.returncode == 0
        and not outcome.timed_out
        and done_line.encode() in outcome.tail.splitlines()
    )
