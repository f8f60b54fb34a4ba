"""Parity with inspect_evals on MATH, HumanEval and MBPP: a fixed list of model outputs, scored by
the project's pipeline (fixture rows → `benchmark_task`'s dataset and scorer) and by
inspect_evals' own task pieces (its `record_to_sample` on the same rows, its scorer), gets the
same verdict item by item and the same accuracy. inspect_evals' code scorers run the program in
a sandbox and take its exit status; here, for honest answers only, that sandbox is a local
`python -c`, while the project's verdict comes from its hardened runner (`evalsuite.untrusted`).
"""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import textwrap

import pytest
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageUser, ModelName, ModelOutput
from inspect_ai.scorer import CORRECT, SampleScore, Target, accuracy
from inspect_ai.solver import TaskState
from inspect_ai.util import ExecResult
from inspect_evals.math import utils as ie_math_utils

from evalsuite import hub
from evalsuite.registry import benchmark
from evalsuite.tasks import benchmark_task, mbpp_solver

# the modules, not the task functions their packages export under the same names
ie_humaneval = importlib.import_module("inspect_evals.humaneval.humaneval")
ie_mbpp = importlib.import_module("inspect_evals.mbpp.mbpp")
ie_math = importlib.import_module("inspect_evals.math.math")


def _state(sample: Sample, completion: str) -> TaskState:
    return TaskState(
        model=ModelName("parity/outputs"),
        sample_id=sample.id or "",
        epoch=1,
        input=sample.input,
        messages=[],
        output=ModelOutput.from_content("parity/outputs", completion),
        metadata=sample.metadata or {},
    )


def _verdicts(scorer, cases: list[tuple[Sample, str]], target=lambda s: Target(s.target)):
    async def run():
        return [await scorer(_state(sample, text), target(sample)) for sample, text in cases]

    scores = asyncio.run(run())
    metric = accuracy()([SampleScore(score=score) for score in scores])
    return [score.value == CORRECT for score in scores], metric


def _project(name: str) -> tuple[dict[str, Sample], object]:
    task = benchmark_task(benchmark(name))
    return {str(sample.id): sample for sample in task.dataset}, task.scorer[0]


def _rows(name: str) -> list[dict]:
    return hub.records(name, benchmark(name).hub)


# --- MATH -----------------------------------------------------------------------------------

# (target as the fixture's solution boxes it, model output, inspect_evals' verdict)
MATH_OUTPUTS = [
    (r"-\dfrac{1}{2}", "So x is negative.\nANSWER: -\\frac{1}{2}", True),
    (r"-\dfrac{1}{2}", "ANSWER: \\frac{1}{2}", False),  # the sign is the answer
    (r"-\dfrac{1}{2}", "ANSWER: -1/2", False),  # its a/b rule reads -1 over 2
    (r"-\dfrac{1}{2}", "ANSWER: \u2212\\frac{1}{2}", False),  # unicode minus: not its minus
    (r"-\dfrac{1}{2}", "ANSWER: $-\\dfrac{1}{2}$", True),
    (r"(-\infty,3]", "ANSWER: (-\\infty, 3]", True),
    (r"(-\infty,3]", "ANSWER: (-\\infty,3)", False),  # an open end is another interval
    (r"(-\infty,3]", "ANSWER: [-\\infty,3]", False),
    ("5", "The edge is five.\nANSWER: 5", True),
    ("5", "ANSWER: \\boxed{5}", False),  # its line answer is not unboxed by is_equiv
    ("5", "The answer is $\\boxed{5}$.", False),  # no answer line: nothing extracted
    ("x-1", "ANSWER: x - 1", True),
    ("x-1", "ANSWER: x+1", False),
    (r"\frac{1}{2}", "ANSWER: 1/2", True),
    (r"\frac{1}{2}", "ANSWER: \\dfrac{1}{2}", True),
    (r"\frac{1}{2}", "ANSWER: \\frac12", True),
    (r"\frac{1}{2}", "ANSWER: 0.5", True),
    (r"\frac{1}{2}", "ANSWER: 1", False),  # the first boxed of the solution
    (r"\frac{1}{2}", "ANSWER: -\\frac{1}{2}", False),
    ("720", "ANSWER: 720^\\circ", True),
    ("720", "ANSWER: 720 degrees", False),
]


def test_math_targets_are_inspect_evals_ones_signs_dfrac_intervals_and_every_box_form():
    rows = _rows("math")
    boxed = [row for row in rows if "\\fbox" not in row["solution"]]  # theirs cannot read it
    theirs = {str(s.id): s.target for s in map(ie_math_utils.record_to_sample, boxed)}
    samples, _ = _project("math")
    targets = {sample_id: sample.target for sample_id, sample in samples.items()}
    assert {k: targets[k] for k in theirs} == theirs and len(boxed) == len(rows) - 1
    assert {r"-\dfrac{1}{2}", r"(-\infty,3]", "5", "x-1", r"\frac{1}{2}"} <= set(targets.values())
    assert len(targets) == len(rows)  # ids unique


def test_math_verdicts_and_accuracy_are_inspect_evals_own():
    samples, scorer = _project("math")
    by_target = {sample.target: sample for sample in samples.values()}
    cases = [(by_target[target], text) for target, text, _ in MATH_OUTPUTS]
    ours, our_accuracy = _verdicts(scorer, cases)
    theirs, their_accuracy = _verdicts(ie_math.expression_exact_match(), cases)
    assert ours == theirs == [verdict for _, _, verdict in MATH_OUTPUTS]
    assert our_accuracy == their_accuracy


# --- HumanEval and MBPP -------------------------------------------------------------------------


class _LocalSandbox:
    """inspect's sandbox().exec, as a local process: for the honest answers below only."""

    async def exec(self, cmd: list[str], timeout: int | None = None) -> ExecResult:
        done = subprocess.run(
            [sys.executable, *cmd[1:]], capture_output=True, text=True, timeout=30, check=False
        )
        return ExecResult(done.returncode == 0, done.returncode, done.stdout, done.stderr)


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{textwrap.dedent(code).strip()}\n```\n"


# (task id, model output, inspect_evals' verdict)
HUMANEVAL_OUTPUTS = [
    ("HumanEval/0", _fenced("def add_numbers(a, b):\n    return a + b"), True),
    ("HumanEval/0", _fenced("def add_numbers(a, b):\n    return a - b"), False),
    ("HumanEval/0", "    return a + b\n", True),  # unfenced: the body, after the prompt
    # a module the answer uses but never imports; and one it imports above the function, which
    # find_code drops with the signature
    ("HumanEval/0", _fenced("def add_numbers(a, b):\n    return math.fsum([a, b])"), False),
    ("HumanEval/0", _fenced("""
        import math
        def add_numbers(a, b):
            return int(math.fsum([a, b]))
        """), False),
    # the signature uses the prompt's `List`, which the answer never imports
    ("HumanEval/5", _fenced("""
        def intersperse(numbers: List[int], delimeter: int) -> List[int]:
            out = []
            for n in numbers:
                out += [n, delimeter]
            return out[:-1]
        """), True),
    ("HumanEval/5", _fenced("""
        def intersperse(numbers: List[int], delimeter: int) -> List[int]:
            return [x for n in numbers for x in (n, delimeter)]
        """), False),
    # the prompt's helpers, which the answer calls and the test calls
    ("HumanEval/38", _fenced("""
        def decode_cyclic(s: str):
            return encode_cyclic(encode_cyclic(s))
        """), True),
    ("HumanEval/38", _fenced("""
        def decode_cyclic(s: str):
            return encode_cyclic(s)
        """), False),
    ("HumanEval/32", _fenced("""
        def find_zero(xs: list):
            begin, end = -1.0, 1.0
            while poly(xs, begin) * poly(xs, end) > 0:
                begin, end = begin * 2.0, end * 2.0
            while end - begin > 1e-10:
                center = (begin + end) / 2.0
                if poly(xs, center) * poly(xs, begin) > 0:
                    begin = center
                else:
                    end = center
            return begin
        """), True),
    ("HumanEval/32", _fenced("def find_zero(xs: list):\n    return 0.0"), False),
    ("HumanEval/6", _fenced("""
        def initials(name: str) -> str:
            return ''.join(word[0].upper() for word in name.split())
        """), True),
]  # fmt: skip

# (task id, model output, inspect_evals' verdict)
MBPP_OUTPUTS = [
    (11, _fenced("def square_all(xs):\n    return [x * x for x in xs]"), True),
    (11, _fenced("def square_all(xs):\n    return [x + x for x in xs]"), False),
    (12, "def first_upper(s):\n    return next((c for c in s if c.isupper()), None)", True),
    (139, _fenced("import math\ndef circle_circumference(r):\n    return 2 * math.pi * r"), True),
    (139, _fenced("def circle_circumference(r):\n    return 3.14 * r"), False),
    (16, _fenced("def ascii_only(s):\n    return ''.join(c for c in s if c.isascii())"), True),
    (16, _fenced("def ascii_only(s):\n    return s.encode('ascii', 'replace').decode()"), False),
]


def test_humaneval_items_and_prompts_are_inspect_evals_own():
    rows = _rows("humaneval")
    samples, _ = _project("humaneval")
    for row in rows:
        theirs = ie_humaneval.record_to_sample()(row)
        ours = samples[str(theirs.id)]
        assert (ours.input, ours.target, ours.metadata["prompt"], ours.metadata["test"]) == (
            theirs.input,
            theirs.target,
            theirs.metadata["prompt"],
            theirs.metadata["test"],
        )
    assert "from typing import List" in samples["HumanEval/5"].metadata["prompt"]
    assert len(samples) == len(rows)  # ids unique


@pytest.mark.parametrize(
    ("name", "outputs", "their_scorer", "key"),
    [
        ("humaneval", HUMANEVAL_OUTPUTS, ie_humaneval, str),
        ("mbpp", MBPP_OUTPUTS, ie_mbpp, lambda task_id: f"mbpp-{task_id}"),
    ],
)
def test_code_verdicts_and_accuracy_are_inspect_evals_own_for_honest_answers(
    name, outputs, their_scorer, key, monkeypatch
):
    samples, scorer = _project(name)
    cases = [(samples[key(task_id)], text) for task_id, text, _ in outputs]
    ours, our_accuracy = _verdicts(scorer, cases)
    monkeypatch.setattr(their_scorer, "sandbox", _LocalSandbox)
    if name == "mbpp":
        # their target is the test list, as their record_to_sample makes it
        theirs, their_accuracy = _verdicts(
            their_scorer.verify(), cases, target=lambda s: Target(s.metadata["test_list"])
        )
    else:
        theirs, their_accuracy = _verdicts(their_scorer.verify(), cases)
    assert ours == theirs == [verdict for _, _, verdict in outputs]
    assert our_accuracy == their_accuracy


def test_mbpp_prompts_are_inspect_evals_template_with_its_three_examples_from_the_cache():
    samples, _ = _project("mbpp")
    assert len(samples) == len(_rows("mbpp")) - 4  # ids unique; the 4 few-shot rows are not items
    sample = samples["mbpp-139"]
    state = _state(sample, "")
    state.messages = [ChatMessageUser(content=str(sample.input))]
    template = mbpp_solver()[0]  # then generate()
    prompt = asyncio.run(template(state, None)).user_prompt.text  # type: ignore[arg-type]
    assert prompt.startswith(ie_mbpp.PROMPT_TEMPLATE)
    assert [n for n in (1, 2, 3, 4) if f"## Prompt {n}\n" in prompt] == [1, 2, 3]
    assert "def similar_elements(" in prompt and "def min_cost(" not in prompt  # tasks 2-4
    assert prompt.endswith(
        f"```python\n{sample.metadata['test_list_str']}\n```\n\n## Completion:\n"
    )
