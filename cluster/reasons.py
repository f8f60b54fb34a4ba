"""Slurm's codes and messages, said in words an agent (or a person) can act on."""

from __future__ import annotations

PENDING_REASONS = {
    "AssocGrpGRESMinutes": "it would overrun the account's GPU-hour budget, so it will not start; "
    "shorten its time limit, use fewer GPUs, or wait for the next budget",
    "AssocGrpGRESRunMinutes": "the GPU-hours of the account's running jobs plus this one would overrun "
    "the budget; it waits until running jobs finish",
    "MaxGRESPerAccount": "the account already uses its maximum number of GPUs at once on this QOS; "
    "it starts when some of its jobs finish",
    "QOSMaxGRESPerAccount": "the account already uses its maximum number of GPUs at once on this QOS; "
    "it starts when some of its jobs finish",
    "QOSMaxGRESPerUser": "the account already uses its maximum number of GPUs at once on this QOS; "
    "it starts when some of its jobs finish",
    "AssocGrpGRES": "the account already uses its maximum number of GPUs at once; it starts when some "
    "of its jobs finish",
    "AssocMaxJobsLimit": "the account runs as many jobs as it may at once",
    "Resources": "waiting for free GPUs",
    "Priority": "waiting behind jobs with higher priority",
    "BeginTime": "waiting for its start time (a requeued job waits a little before it restarts)",
    "Dependency": "waiting for the jobs it depends on",
    "JobHeldUser": "held by its owner",
    "JobHeldAdmin": "held by the organizers",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above the maximum per job",
    "PartitionTimeLimit": "its time limit is above the partition's maximum",
    "ReqNodeNotAvail": "the requested nodes are not available",
    "NodeDown": "a node it needs is down",
}


def pending_reason(code: str) -> str:
    """Why a job waits, in words ("" when it does not wait for anything in particular)."""
    if not code or code == "None":
        return ""
    return PENDING_REASONS.get(code, f"waiting ({code})")


SUBMIT_ERRORS = [
    # (a fragment of sbatch's stderr, what to tell the user)
    (
        "QOSMaxWallDurationPerJobLimit",
        "the time limit is above the maximum of {max_job_hours} h per job",
    ),
    (
        "MaxWallDurationPerJobLimit",
        "the time limit is above the maximum of {max_job_hours} h per job",
    ),
    (
        "QOSMaxGRESPerAccount",
        "the job asks for more GPUs than the account may use at once on this QOS",
    ),
    ("QOSMaxGRESPerJob", "the job asks for more GPUs than one job may use"),
    ("AssocGrpGRESMinutes", "the job would overrun the account's GPU-hour budget"),
    ("AssocMaxSubmitJobLimit", "the account may not submit jobs now{blocked}"),
    ("Invalid account", "you may not submit under that account"),
    ("Invalid qos", "you may not use that QOS"),
    ("Requested node configuration is not available", "no node has that many GPUs"),
    (
        "Requested time limit is invalid",
        "the time limit is above the maximum of {max_job_hours} h per job",
    ),
]


def submit_error(stderr: str, *, max_job_hours: int | str = "the", blocked_reason: str = "") -> str:
    blocked = f": {blocked_reason}" if blocked_reason else ""
    for fragment, message in SUBMIT_ERRORS:
        if fragment.lower() in stderr.lower():
            return message.format(max_job_hours=max_job_hours, blocked=blocked)
    # Unknown: Slurm's own words are better than nothing.
    return stderr.strip().removeprefix("sbatch: error: ") or "the scheduler refused the job"
