"""WildBench (Lin et al., 2024): the v2 fixture read through the production loader, the
conversation reaching the model as chat messages, and the WB-Score judge run through the runner
with the scripted server as the judge."""

import json
import math
import statistics
from pathlib import Path

import pytest

from arena.serving.client import Endpoint
from evalsuite.benchmark_metrics import wildbench_metrics
from evalsuite.items import AnsweredItem
from evalsuite.registry import benchmark, benchmark_items
from evalsuite.rubric_judges import JudgeFormatError, wildbench_grade, wildbench_prompt
from evalsuite.runner import run_benchmarks
from tests.support.scripted_llm import Script

MULTI_TURN = "wildbench-wb-fixture-0003"


def judged(score: object, *, before: str = "The answer is correct and clear.") -> str:
    block = {"strengths": "Correct.", "weaknesses": "Terse.", "score": score}
    return f"{before}\n```json\n{json.dumps(block)}\n```"


@pytest.fixture
def run_wildbench(scripted_llm, tmp_path):
    def run(judge_text: str, answer: str = "Here is my answer."):
        scripted_llm.scripts["wb-model"] = Script(answer, 64, 0)
        scripted_llm.scripts["wb-judge"] = Script(judge_text, 64, 0)
        (outcome,) = run_benchmarks(
            endpoint=Endpoint(base_url=scripted_llm.base_url, model="wb-model"),
            judge=Endpoint(base_url=scripted_llm.base_url, model="wb-judge"),
            benchmark_names=["wildbench"],
            log_dir=str(tmp_path),
        )
        return outcome

    return run


def test_wildbench_items_are_the_v2_conversations_with_their_checklists():
    entry = benchmark("wildbench")
    assert (entry.domain, entry.held_out, entry.rubric) == ("chat", False, "wildbench")
    assert entry.source == "allenai/WildBench@7c05c1b45502 v2 test"
    items = {item.id: item for item in benchmark_items("wildbench")}
    assert len(items) == 5
    single = items["wildbench-wb-fixture-0002"]
    assert single.metadata["messages"] == [
        {"role": "user", "content": "What is the time complexity of binary search, and why?"}
    ]
    assert single.metadata["checklist"] == single.target.split("\n")
    assert single.metadata["primary_tag"] == "Information seeking"
    # the audits index the user turns of a conversation, not the assistant's
    multi = items[MULTI_TURN]
    assert [turn["role"] for turn in multi.metadata["messages"]] == ["user", "assistant", "user"]
    assert multi.prompt == (
        "I have 3 apples and buy 5 more. How many do I have?\n\n"
        "Now I give away half of them. How many are left?"
    )
    assert "You have 8 apples." not in multi.prompt


def test_a_multi_turn_task_reaches_the_model_as_its_chat_messages(run_wildbench):
    outcome = run_wildbench(judged(8))
    log = json.loads(Path(outcome.log_path).read_text())
    sample = next(s for s in log["samples"] if s["id"] == MULTI_TURN)
    sent = [(m["role"], m["content"]) for m in sample["messages"]]
    assert sent == [
        ("user", "I have 3 apples and buy 5 more. How many do I have?"),
        ("assistant", "You have 8 apples."),
        ("user", "Now I give away half of them. How many are left?"),
        ("assistant", "Here is my answer."),
    ]


def test_each_answer_is_worth_its_judge_score_and_the_wb_score_is_reported_beside(run_wildbench):
    outcome = run_wildbench(judged(8))
    assert outcome.error == "" and outcome.n == 5
    assert outcome.score == pytest.approx(7 / 9)  # (8 − 1) / 9 on every item
    assert outcome.stderr == pytest.approx(0.0)
    wb = outcome.metrics["wb_score"]
    assert (wb.value, wb.stderr, wb.n) == (pytest.approx(60.0), pytest.approx(0.0), 5)
    assert outcome.metrics["judge_score"].value == pytest.approx(8.0)
    assert all('"score": 8' in item.explanation for item in outcome.items)


def test_an_empty_answer_scores_the_lowest_without_asking_the_judge(run_wildbench):
    outcome = run_wildbench("nothing a scorer could read", answer="")
    assert (outcome.score, outcome.error) == (0.0, "")
    assert outcome.metrics["wb_score"].value == pytest.approx(-80.0)  # (1 − 5) · 2 · 10


def test_a_judge_that_ignores_the_format_leaves_wildbench_unscored_with_its_reason(
    run_wildbench,
):
    outcome = run_wildbench("I would rate this an 8 out of 10.")
    assert outcome.score is None
    assert 'WildBench judge gave no JSON block with a "score"' in outcome.error


def test_the_judge_sees_the_history_the_last_query_the_response_and_the_checklist():
    item = next(i for i in benchmark_items("wildbench") if i.id == MULTI_TURN)
    prompt = wildbench_prompt(item.metadata["messages"], item.metadata["checklist"], "Four.")
    history = prompt.split("<|begin_of_history|>")[1].split("<|end_of_history|>")[0]
    assert history.strip() == (
        "USER: I have 3 apples and buy 5 more. How many do I have?\n\nASSISTANT: You have 8 apples."
    )
    query = prompt.split("<|begin_of_query|>")[1].split("<|end_of_query|>")[0]
    assert query.strip() == "Now I give away half of them. How many are left?"
    assert "<|begin_of_response|>\nFour.\n<|end_of_response|>" in prompt
    assert "- Does it answer 4?" in prompt


def test_the_grade_is_the_last_json_block_with_a_score_from_one_to_ten():
    grade = wildbench_grade(judged("7"))  # their template asks for the score as a string
    assert (grade.score, grade.strengths, grade.weaknesses) == (7.0, "Correct.", "Terse.")
    assert (grade.value, grade.wb_score) == (pytest.approx(6 / 9), pytest.approx(40.0))
    # a JSON block quoted from the response comes before the judge's own
    quoted = judged(9, before='The response printed {"score": 1} as its example.')
    assert wildbench_grade(quoted).score == 9.0
    # a trailing object without a score does not hide the verdict before it
    assert wildbench_grade(judged(3) + '\n{"note": "done"}').score == 3.0
    for odd, reason in (
        (judged(11), "not between 1 and 10"),
        (judged(0), "not between 1 and 10"),
        (judged("eight"), "not a number"),
        (judged(True), "not a number"),
        (judged(None), "not a number"),
        ('{"strengths": "x", "score": ', "no JSON block"),
        ("Score: 7", "no JSON block"),
    ):
        with pytest.raises(JudgeFormatError, match=reason):
            wildbench_grade(odd)


def test_a_judge_answer_full_of_braces_is_rejected_quickly():
    with pytest.raises(JudgeFormatError, match="no JSON block"):
        wildbench_grade("{" * 2_000_000)


def test_wb_score_is_the_mean_of_the_rescaled_judge_scores_with_its_standard_error():
    items = [
        AnsweredItem({}, "answer", {"wildbench_score": s, "wb_score": (s - 5) * 2 * 10})
        for s in (10, 5, 1)
    ]
    metrics = wildbench_metrics(items)
    rescaled = [100, 0, -80]
    assert metrics["wb_score"].value == pytest.approx(20 / 3)
    assert metrics["wb_score"].stderr == pytest.approx(statistics.stdev(rescaled) / math.sqrt(3))
    assert metrics["wb_score"].n == 3
    assert metrics["judge_score"].value == pytest.approx(16 / 3)
