"""How `arena-agent evals` prints what the API returns (the API itself: tests/evalsuite/)."""

from agents.agent_cli import show_eval_run, show_progress

PROGRESS = {
    "headlines": {
        "4": {"score": 0.61, "stderr": 0.02, "n": 9},
        "7": {"score": 0.4, "stderr": 0.03, "n": 9},
    },
    "pareto": ["4"],
    "chosen": "7",
    "post_peak": {"chosen": "7", "best": "4", "drop": 0.21, "drop_stderr": 0.036},
}


def test_the_pareto_set_and_a_post_peak_warning_are_spelled_out():
    text = show_progress(PROGRESS)
    assert "checkpoint      4  headline 0.610 ± 0.020 (n=9)  Pareto" in text
    assert "checkpoint      7  headline 0.400 ± 0.030 (n=9)  chosen" in text
    assert text.splitlines()[-1] == (
        "WARNING post-peak: checkpoint 7 is below your earlier checkpoint 4 (drop 0.210 ± 0.036)"
    )
    assert "WARNING" not in show_progress({**PROGRESS, "post_peak": None})


def test_a_checkpoint_without_a_headline_says_why():
    text = show_progress(
        {**PROGRESS, "without_headline": {"9": "no benchmark where instruct beats base"}}
    )
    assert "checkpoint      9  no headline: no benchmark where instruct beats base" in text


def test_a_run_shows_each_score_and_on_request_each_item():
    run = {
        "id": 3, "checkpoint": 7, "benchmarks": ["gsm8k", "mmlu"], "state": "done", "job": "41",
        "error": "",
        "results": [
            {"benchmark": "gsm8k", "score": 0.5, "stderr": 0.25, "n": 4, "error": "",
             "items": [{"item_id": "gsm8k-1", "value": 1.0, "answer": "42"}]},
            {"benchmark": "mmlu", "score": None, "stderr": None, "n": 0, "error": "no samples"},
        ],
    }  # fmt: skip
    text = show_eval_run(run)
    assert text.splitlines() == [
        "run 3: checkpoint 7 on gsm8k, mmlu  done  job 41",
        "  gsm8k            0.500 ± 0.250 (n=4)",
        "  mmlu             not scored (no samples)",
    ]
    assert "gsm8k-1                  1.00  '42'" in show_eval_run(run, items=True)
