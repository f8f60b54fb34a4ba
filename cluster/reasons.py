"""Slurm's codes and messages, said in words an agent (or a person) can act on.

Slurm's spelling changes between releases (22.05 says `MaxGRESPerAccount`, later releases
`QOSMaxGRESPerAccount`), so codes are matched without the `QOS` prefix, and an unknown code
gets a sentence of its own rather than being shown raw.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_GPUS_AT_ONCE = (
    "the account already uses its maximum number of GPUs at once on this QOS; it starts when "
    "some of its jobs finish"
)
_CPUS_AT_ONCE = (
    "the account already uses its maximum number of CPUs at once on this QOS (CPUs are capped "
    "in proportion to GPUs); it starts when some of its jobs finish"
)
_MEMORY_AT_ONCE = (
    "the account already uses its maximum memory at once on this QOS (memory is capped in "
    "proportion to GPUs); it starts when some of its jobs finish"
)

# Keys are codes without a leading "QOS" (see `_key`).
PENDING_REASONS = {
    "AssocGrpGRESMinutes": "it would overrun the account's GPU-hour budget, so it will not start; "
    "shorten its time limit, use fewer GPUs, or wait for the next budget",
    # The budget is in billing units: GPUs, or the CPUs and memory of as many GPUs.
    "AssocGrpBillingMinutes": "it would overrun the account's GPU-hour budget (CPUs and memory "
    "count as the GPUs they come with), so it will not start; shorten its time limit, ask for "
    "fewer GPUs, CPUs or less memory, or wait for the next budget",
    "AssocGrpBillingRunMinutes": "the GPU-hours of the account's running jobs plus this one "
    "would overrun the budget; it waits until running jobs finish",
    "AssocGrpGRESRunMinutes": "the GPU-hours of the account's running jobs plus this one would "
    "overrun the budget; it waits until running jobs finish",
    "MaxGRESPerAccount": _GPUS_AT_ONCE,
    "MaxGRESPerUser": _GPUS_AT_ONCE,
    "AssocGrpGRES": "the account already uses its maximum number of GPUs at once; it starts "
    "when some of its jobs finish",
    "MaxCpuPerAccount": _CPUS_AT_ONCE,
    "MaxMemoryPerAccount": _MEMORY_AT_ONCE,
    "MaxMemPerAccount": _MEMORY_AT_ONCE,
    "AssocMaxJobsLimit": "the account runs as many jobs as it may at once",
    "AssocMaxSubmitJobLimit": "the account may not submit or start jobs now",
    "Resources": "waiting for free GPUs",
    "Priority": "waiting behind jobs with higher priority",
    "BeginTime": "waiting for its start time (a requeued job waits a little before it restarts)",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "a job it depends on failed, so it will never start; cancel it",
    "JobHeldUser": "held by its owner",
    "JobHeldAdmin": "held by the organizers",
    "MaxWallDurationPerJobLimit": "its time limit is above the maximum per job",
    "PartitionTimeLimit": "its time limit is above the partition's maximum",
    "ReqNodeNotAvail": "the requested nodes are not available",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "the partition is down; it starts when the organizers bring it back",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "launch failed requeued held": "its start failed and it was held; the organizers can release it",
}
UNKNOWN_PENDING = "waiting in the queue until the scheduler can start it"


def _key(code: str) -> str:
    code = code.strip()
    # "ReqNodeNotAvail, UnavailableNodes:n3" and the like: the code is the first word.
    code = code.split(",", 1)[0].strip()
    return code.removeprefix("QOS") if code.startswith("QOSMax") else code


def pending_reason(code: str) -> str:
    """Why a job waits, in words ("" when it does not wait for anything in particular)."""
    if not code or code == "None":
        return ""
    words = PENDING_REASONS.get(_key(code))
    if words is None:
        log.info("no words for Slurm pending reason %r", code)
        return UNKNOWN_PENDING
    return words


# (a fragment of sbatch's stderr, what to tell the user); the first fragment found wins, so a
# fragment that is part of another comes after it. Matched case-insensitively.
SUBMIT_ERRORS = [
    ("MaxWallDurationPerJobLimit", "the time limit is above the maximum{max_hours} per job"),
    ("Requested time limit is invalid", "the time limit is above the maximum{max_hours} per job"),
    (
        "MaxGRESPerAccount",
        "the job asks for more GPUs than the account may use at once on this QOS",
    ),
    ("MaxGRESPerJob", "the job asks for more GPUs than one job may use"),
    (
        "MaxCpuPerAccount",
        "the job asks for more CPUs than the account may use at once on this QOS (CPUs are "
        "capped in proportion to its GPUs)",
    ),
    (
        "MaxMemoryPerAccount",
        "the job asks for more memory than the account may use at once on this QOS (memory is "
        "capped in proportion to its GPUs)",
    ),
    (
        "MaxMemPerAccount",
        "the job asks for more memory than the account may use at once on this QOS (memory is "
        "capped in proportion to its GPUs)",
    ),
    ("AssocGrpGRESMinutes", "the job would overrun the account's GPU-hour budget"),
    (
        "AssocGrpBillingMinutes",
        "the job would overrun the account's GPU-hour budget (CPUs and memory count as the "
        "GPUs they come with)",
    ),
    (
        "AssocGrpBillingRunMinutes",
        "the job and the account's running jobs together could overrun its GPU-hour budget",
    ),
    (
        "AssocGrpGRESRunMinutes",
        "the job and the account's running jobs together could overrun its GPU-hour budget",
    ),
    ("AssocGrpGRES", "the job asks for more GPUs than the account may use at once"),
    ("AssocMaxSubmitJobLimit", "the account may not submit jobs now{blocked}"),
    (
        "GrpSubmitJobs",
        "the account already has the most jobs it may have queued at once; wait for some to end",
    ),
    ("Invalid account", "you may not submit under that account"),
    ("Invalid qos", "you may not use that QOS"),
    ("Requested node configuration is not available", "no node has that many GPUs, CPUs or memory"),
    ("Memory required by task is not available", "no node has that much memory"),
]


UNKNOWN_LIMIT = (
    "the job is over one of the account's limits (GPUs, CPUs or memory at once, time per job, "
    "or GPU-hour budget)"
)


# Slurm's words for a job larger than the GPU-hours its account has left (alone, or with its
# running jobs).
OVER_BUDGET = (
    "AssocGrpGRESMinutes",
    "AssocGrpBillingMinutes",
    "AssocGrpBillingRunMinutes",
    "AssocGrpGRESRunMinutes",
)


def submit_refusal_code(stderr: str) -> str:
    """SubmitRefused's code for the scheduler's refusal: "over_budget" or "refused"."""
    return "over_budget" if any(f.lower() in stderr.lower() for f in OVER_BUDGET) else "refused"


def submit_error(stderr: str, *, max_job_hours: int | None = None, blocked_reason: str = "") -> str:
    """Why the scheduler refused a job, in words. `max_job_hours` and `blocked_reason` are
    what the platform knows of the account; without them the sentence leaves them out."""
    blocked = f": {blocked_reason}" if blocked_reason else ""
    max_hours = f" of {max_job_hours} h" if max_job_hours is not None else ""
    for fragment, message in SUBMIT_ERRORS:
        if fragment.lower() in stderr.lower():
            return message.format(max_hours=max_hours, blocked=blocked)
    log.info("no words for Slurm's refusal %r", stderr)
    if "violates accounting/QOS policy" in stderr:
        return UNKNOWN_LIMIT
    # Otherwise Slurm's own sentence (its first line, without the program's name) is better
    # than nothing.
    first = next((line for line in stderr.strip().splitlines() if line.strip()), "")
    for prefix in ("sbatch: error: ", "srun: error: ", "error: ", "Batch job submission failed: "):
        first = first.removeprefix(prefix)
    return first.strip() or "the scheduler refused the job"
