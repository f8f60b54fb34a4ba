"""Slurm's refusals and pending reasons in words, from what Slurm 22.05 really prints
(captured on the local cluster, infra/slurm), never a bare code."""

from __future__ import annotations

import re

import pytest

from cluster.reasons import UNKNOWN_LIMIT, UNKNOWN_PENDING, pending_reason, submit_error

POLICY = (
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
    "(job submit limit, user's size and/or time limits)"
)


def refused(code: str) -> str:
    return f"sbatch: error: {code}\n{POLICY}\n"


@pytest.mark.parametrize(
    ("stderr", "words"),
    [
        (refused("MaxGRESPerAccount"),  # 22.05
         "the job asks for more GPUs than the account may use at once on this QOS"),
        (refused("QOSMaxGRESPerAccount"),  # later releases
         "the job asks for more GPUs than the account may use at once on this QOS"),
        (refused("AssocGrpGRESMinutes"), "the job would overrun the account's GPU-hour budget"),
        (refused("MaxCpuPerAccount"),
         "the job asks for more CPUs than the account may use at once on this QOS (CPUs are "
         "capped in proportion to its GPUs)"),
        (refused("MaxMemoryPerAccount"),
         "the job asks for more memory than the account may use at once on this QOS (memory "
         "is capped in proportion to its GPUs)"),
        ("sbatch: error: Batch job submission failed: Invalid account or account/partition "
         "combination specified\n", "you may not submit under that account"),
        ("sbatch: error: Batch job submission failed: Invalid qos specification\n",
         "you may not use that QOS"),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not "
         "available\n", "no node has that many GPUs, CPUs or memory"),
    ],
)  # fmt: skip
def test_refusals_are_said_in_words(stderr, words):
    assert submit_error(stderr) == words


def test_the_time_limit_is_said_with_the_accounts_maximum_or_without_a_number():
    stderr = refused("QOSMaxWallDurationPerJobLimit")
    assert submit_error(stderr, max_job_hours=24) == (
        "the time limit is above the maximum of 24 h per job"
    )
    assert submit_error(stderr) == "the time limit is above the maximum per job"


def test_a_blocked_account_is_told_why():
    stderr = refused("AssocMaxSubmitJobLimit")
    assert submit_error(stderr, blocked_reason="the agent was deprovisioned") == (
        "the account may not submit jobs now: the agent was deprovisioned"
    )
    assert submit_error(stderr) == "the account may not submit jobs now"


def test_an_unknown_limit_is_said_in_words_not_as_its_code():
    words = submit_error(refused("QOSGrpBillingMinutes"))
    assert words == UNKNOWN_LIMIT
    assert not re.search(r"[a-z][A-Z]", words), "no CamelCase code"


def test_an_unknown_error_keeps_slurms_own_sentence():
    stderr = "sbatch: error: Batch job submission failed: Node count specification invalid\n"
    assert submit_error(stderr) == "Node count specification invalid"


@pytest.mark.parametrize(
    ("code", "start"),
    [
        ("MaxGRESPerAccount", "the account already uses its maximum number of GPUs at once"),
        ("QOSMaxGRESPerAccount", "the account already uses its maximum number of GPUs at once"),
        ("MaxCpuPerAccount", "the account already uses its maximum number of CPUs at once"),
        ("MaxMemoryPerAccount", "the account already uses its maximum memory at once"),
        ("AssocGrpGRESMinutes", "it would overrun the account's GPU-hour budget"),
        ("AssocMaxSubmitJobLimit", "the account may not submit or start jobs now"),
        ("BeginTime", "waiting for its start time"),
        ("Resources", "waiting for free GPUs"),
        ("ReqNodeNotAvail, UnavailableNodes:n3", "the requested nodes are not available"),
    ],
)
def test_pending_reasons_are_said_in_words(code, start):
    assert pending_reason(code).startswith(start)


@pytest.mark.parametrize("code", ["QOSGrpBillingMinutes", "SomethingNew", "FrontEndDown"])
def test_an_unknown_pending_reason_gets_a_sentence_not_its_code(code):
    assert pending_reason(code) == UNKNOWN_PENDING
    assert code not in pending_reason(code)


@pytest.mark.parametrize("code", ["", "None"])
def test_nothing_to_wait_for_says_nothing(code):
    assert pending_reason(code) == ""
