"""The strategy lock-in measure on hand-made cases, each worked out by hand in its comments."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from agents.strategy import (
    Attempt,
    data_approach,
    job_approach,
    learning_rate_exponent,
    lock_in,
)

START = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
END = START + dt.timedelta(days=10)


def day(n: float) -> dt.datetime:
    return START + dt.timedelta(days=n)


@pytest.mark.parametrize(
    ("name", "script", "approach"),
    [
        ("sft-run", "accelerate launch train.py --lr 2e-5", "sft lr~1e-5"),
        # 9e-5 is in the same decade as 2e-5; 1e-4 is the next one.
        ("job", "python train_sft.py --learning_rate=9e-5", "sft lr~1e-5"),
        ("job", "python train_sft.py --learning_rate=1e-4", "sft lr~1e-4"),
        ("dpo", "trl dpo --use_peft --lora_r 16 --learning-rate 5e-7", "dpo+lora lr~1e-7"),
        ("q", 'cfg = {"learning_rate": 0.0003, "method": "QLoRA"}', "qlora lr~1e-4"),
        ("big", "torchrun --fsdp 'full_shard' sft.py", "fsdp+sft"),
        ("ds", "deepspeed --zero3 train.py LR=1E-5", "deepspeed lr~1e-5"),
        ("plain", "python train.py --lr 3e-4", "unmarked lr~1e-4"),
        # Not training attempts: no recipe marker, no learning rate.
        ("eval", "python eval.py --checkpoint out/ckpt-3", None),
        ("hello", "echo hello", None),
        # `warmup_lr`, `lr_scheduler_type` and "blurry" are not a learning rate.
        ("x", "warmup_lr=1e-6 lr_scheduler_type=cosine blurry=2", None),
    ],
)
def test_a_jobs_approach_is_its_recipe_and_learning_rate_decade(name, script, approach):
    assert job_approach(name, script) == approach


def test_the_first_positive_learning_rate_counts():
    assert learning_rate_exponent("lr=0 then lr=0.02") == -2
    assert learning_rate_exponent("lr: 1") == 0
    assert learning_rate_exponent("nothing here") is None


def test_one_data_set_spelled_several_ways_is_one_source():
    spellings = [
        "HuggingFaceH4/ultrachat_200k",
        "https://huggingface.co/datasets/HuggingFaceH4/ultrachat_200k/",
        "hf://datasets/huggingfaceh4/ultrachat_200k",
    ]
    assert {data_approach(s) for s in spellings} == {"data:huggingfaceh4/ultrachat_200k"}
    assert data_approach("generated:tiny-chats") == "data:generated:tiny-chats"


def test_no_attempts_means_no_lock_in():
    measure = lock_in([], starts_at=START, ends_at=END)
    assert (measure.approaches, measure.attempts, measure.locked_in_at) == (0, 0, None)
    assert measure.share_elapsed is None and measure.attempts_after_lock_in == 0


def test_an_agent_that_explores_early_then_exploits_locks_in_early():
    # Days 0, 1, 2: three new approaches; days 3..9: only repeats. The last new approach is
    # on day 2 of 10, so 20% of the phase had passed; 10 attempts - 3 approaches = 7 repeats.
    attempts = [
        Attempt(day(0), "sft lr~1e-5"),
        Attempt(day(1), "dpo lr~1e-6"),
        Attempt(day(2), "data:ultrachat"),
        *[Attempt(day(n), "dpo lr~1e-6") for n in range(3, 10)],
    ]
    measure = lock_in(attempts, starts_at=START, ends_at=END)
    assert measure.approaches == 3 and measure.attempts == 10
    assert measure.locked_in_at == day(2)
    assert measure.share_elapsed == pytest.approx(0.2)
    assert measure.attempts_after_lock_in == 7
    assert measure.approach_names == ("sft lr~1e-5", "dpo lr~1e-6", "data:ultrachat")


def test_order_given_does_not_matter_only_time_does():
    # Given newest first: sorted by time, "b" first appears on day 7.5 -> 75% of the phase.
    attempts = [Attempt(day(7.5), "b"), Attempt(day(5), "a"), Attempt(day(1), "a")]
    measure = lock_in(attempts, starts_at=START, ends_at=END)
    assert measure.locked_in_at == day(7.5)
    assert measure.share_elapsed == pytest.approx(0.75)
    assert measure.approach_names == ("a", "b")


def test_attempts_outside_the_phase_are_clamped_to_it():
    # Data registered a day before the phase: share 0, not negative. A late job: at most 1.
    assert lock_in([Attempt(day(-1), "a")], starts_at=START, ends_at=END).share_elapsed == 0.0
    assert lock_in([Attempt(day(12), "a")], starts_at=START, ends_at=END).share_elapsed == 1.0


def test_a_phase_that_does_not_end_after_it_starts_is_refused():
    with pytest.raises(ValueError, match="must end after it starts"):
        lock_in([], starts_at=END, ends_at=START)


def test_a_huge_hostile_script_is_read_in_bounded_time():
    # 10 MB of near-misses for every pattern: only the first 64 KiB are read.
    script = ("lr" + "9" * 40 + " learning_rate=" + "." * 30 + " dp o_lor a ") * 200_000
    began = time.monotonic()
    job_approach("x" * 1_000_000, script)
    assert time.monotonic() - began < 2


@pytest.mark.parametrize(
    ("method", "kind", "approach"),
    [("full", "sft", "sft"), ("lora", "sft", "lora+sft"), ("full", "dpo", "dpo")],
)
def test_the_reference_agents_own_job_scripts_show_their_recipe(tmp_path, method, kind, approach):
    # The script the reference agent submits, rendered by its own launcher.
    from agents.reference.launcher import render_job_script

    command = ["-m", f"agents.reference.train_{kind}", "--data", str(tmp_path / "pairs.jsonl"),
               "--method", method, "--steps", "30"]  # fmt: skip
    name = f"ref-{method}-{kind}"
    script = render_job_script(
        job_name=name, nodes=1, gpus_per_node=2, time_limit_minutes=20, workdir=tmp_path,
        python="/opt/train-env/bin/python", command=command,
    )  # fmt: skip
    assert job_approach(name, script) == approach
