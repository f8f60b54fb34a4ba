"""What the Slurm cluster must enforce, in one place: `security check` compares the running
cluster (`scontrol show config`, `scontrol show partition`) with these values.

infra/slurm/setup.sh establishes them on the local cluster; whoever changes the enforcement,
the billing or the process tracking there changes the matching line here.
"""

from __future__ import annotations

# Keys whose comma-separated value must include these items.
SLURM_CONFIG_CONTAINS: dict[str, tuple[str, ...]] = {
    # Without associations/limits/qos a job runs outside its agent's budget; without `safe` a
    # job may start that its remaining GPU-minutes cannot finish.
    "AccountingStorageEnforce": ("associations", "limits", "qos", "safe"),
    # A job's processes are confined in and die with its cgroup (issue 12, item 8).
    "TaskPlugin": ("task/cgroup",),
    # Billing is the largest weighted TRES of a job (GPU-equivalents), not their sum.
    "PriorityFlags": ("MAX_TRES",),
}

# Keys that must have exactly this value.
SLURM_CONFIG_EQUALS: dict[str, str] = {
    "ProctrackType": "proctrack/cgroup",
    # A job is held to the memory it was given (and billed for), not the whole node's.
    "ConstrainRAMSpace": "yes",
}

# Every partition must bill these (a positive TRESBillingWeights entry each), or jobs that use
# only CPUs or only memory hold whole nodes, and their GPUs, for free.
BILLING_WEIGHTED_TRES: tuple[str, ...] = ("CPU", "Mem", "GRES/gpu")

# slurmdbd's database passwords infra/slurm/setup.sh used to write into every install
# (`git log -p infra/slurm/setup.sh`: DB_PASS=${ARENA_SLURM_DB_PASS:-arena-slurm-local}).
SLURMDBD_OLD_DEFAULT_PASSWORDS: frozenset[str] = frozenset({"arena-slurm-local"})
