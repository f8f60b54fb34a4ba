"""Submit-to-running latency on the local Slurm cluster: through the platform vs plain sbatch.

For N one-GPU jobs each way, measures the time from the call (the platform's `job_submit`,
or `sbatch --parsable` run directly) until the controller reports the job RUNNING, polling
`squeue` every 20 ms. Needs the cluster (`infra/slurm/setup.sh`, as root). Uses its own
SQLite database under var/ and an account `agent_bench`.

Run: `.venv/bin/python bench/cluster_latency.py [--jobs N]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
os.environ["DATABASE_URL"] = f"sqlite:///{ROOT / 'var' / 'bench-cluster.sqlite3'}"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from cluster.backends.base import AccountLimits, JobRequest  # noqa: E402
from cluster.backends.slurm import SlurmBackend  # noqa: E402
from cluster.services import account_ensure, job_submit  # noqa: E402
from cluster.slurm import cli  # noqa: E402


def until_running(scheduler_id: str, started: float, timeout_s: float = 60) -> float:
    while time.perf_counter() - started < timeout_s:
        rows = cli.squeue_rows({"state": "%T"}, "-j", scheduler_id)
        if rows and rows[0]["state"] == "RUNNING":
            return time.perf_counter() - started
        if not rows and cli.sacct_rows(["State"], "-X", "-j", scheduler_id):
            return time.perf_counter() - started  # already done
        time.sleep(0.02)
    raise TimeoutError(f"job {scheduler_id} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    if not cli.available():
        sys.exit("the local Slurm cluster is not running: sudo infra/slurm/setup.sh")
    call_command("migrate", verbosity=0)
    slurm = SlurmBackend(partition="gpu", parent_account="agents")
    limits = AccountLimits(gpu_hours=1000, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)
    account = account_ensure(
        name="agent_bench",
        unix_user="root",
        period="bench",
        limits=limits,
        storage_gib=400,
        backend=slurm,
    )
    workdir = Path(tempfile.mkdtemp(prefix="arena-bench-"))
    request = JobRequest(name="bench", script="#!/bin/bash\nsleep 2\n", nodes=1, gpus_per_node=1,
                         time_limit_minutes=2, preemptible=False, workdir=workdir)  # fmt: skip

    platform, plain = [], []
    for _ in range(args.jobs):
        started = time.perf_counter()
        job = job_submit(account=account, request=request, backend=slurm)
        platform.append(until_running(job.scheduler_id, started))
        started = time.perf_counter()
        result = cli.run(["sbatch", "--parsable", "--account=agent_bench", "--gres=gpu:1", "-t", "2",
                          f"--chdir={workdir}", f"--output={workdir}/plain-%j.out", "--wrap", "sleep 2"])  # fmt: skip
        plain.append(until_running(result.stdout.strip().split(";")[0], started))
    cli.run(["scancel", "-A", "agent_bench"], check=False)

    def line(name: str, values: list[float]) -> str:
        return f"{name:<10} median {statistics.median(values) * 1000:6.0f} ms   min {min(values) * 1000:6.0f} ms   max {max(values) * 1000:6.0f} ms"

    print(f"submit -> RUNNING, {args.jobs} one-GPU jobs each")
    print(line("platform", platform))
    print(line("sbatch", plain))
    print(
        f"platform / sbatch (medians): {statistics.median(platform) / statistics.median(plain):.2f}x"
    )


if __name__ == "__main__":
    main()
