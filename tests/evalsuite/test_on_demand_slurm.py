"""End to end, as an agent: from its sandbox, as its own Unix user, with `arena-agent`, it
registers a checkpoint (the tiny base model) and asks for a proxy benchmark on it; the run is
a Slurm job charged to the agent's account that copies, serves and evaluates the checkpoint;
the agent reads its score, standard error and per-item answers, and its Pareto set. It can
also cancel a run while its job runs, and is charged for the time it ran."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from cluster.models import Job
from cluster.services import cluster_sync
from evalsuite.models import EvalRun
from tests.factories import running_phase
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")
NAME = "evals_ann"


@pytest.fixture
def agent(arena, slurm, settings):
    settings.AGENTS_ARENA_URL = arena.url
    running_phase()
    sandboxes = UnixSandboxes(ROOT)
    done = agent_provision(name=NAME, sandboxes=sandboxes, backend=slurm)
    yield done
    agent_deprovision(name=NAME, sandboxes=sandboxes, backend=slurm)


def cli(agent, *args: str) -> subprocess.CompletedProcess[str]:
    home = agent.agent.sandbox
    return subprocess.run(
        ["runuser", "-u", agent.agent.unix_user, "--", "env", f"HOME={home}", "/usr/bin/python3",
         f"{home}/.arena/bin/arena-agent", *args],
        capture_output=True, text=True, cwd=home, timeout=180, check=False,
    )  # fmt: skip


def read(agent, *args: str) -> dict:
    done = cli(agent, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def until(agent, predicate, *args: str, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        found = read(agent, *args)
        if predicate(found) or time.monotonic() > deadline:
            return found
        time.sleep(2)


def registered_checkpoint(agent, tiny_models) -> int:
    """The tiny base model put in the agent's sandbox as its own and registered by it."""
    sandbox = Path(agent.agent.sandbox)
    shutil.rmtree(sandbox / "ckpt-1", ignore_errors=True)  # from an earlier run
    shutil.copytree(tiny_models / "base", sandbox / "ckpt-1")
    shutil.chown(sandbox / "ckpt-1", agent.agent.unix_user)
    for file in (sandbox / "ckpt-1").rglob("*"):
        shutil.chown(file, agent.agent.unix_user)
    made = read(agent, "submit", "--wrap", "true", "--time", "1", "--gpus", "0", "--name", "sft")
    job = until(agent, lambda j: j["state"] == "COMPLETED", "job", made["id"], seconds=90)
    assert job["state"] == "COMPLETED", job
    return read(agent, "checkpoints", "register", "ckpt-1", "--job", made["id"])["id"]


def test_an_agent_evaluates_its_checkpoint_on_slurm_and_reads_its_scores(agent, tiny_models):
    checkpoint = registered_checkpoint(agent, tiny_models)

    held_out = cli(agent, "evals", "run", str(checkpoint), "--benchmark", "mmlu-pro")
    assert held_out.returncode == 1 and "mmlu-pro is a held-out benchmark" in held_out.stderr
    run = read(agent, "evals", "run", str(checkpoint), "--benchmark", "gsm8k")
    assert run["state"] == "queued" and run["benchmarks"] == ["gsm8k"], run
    stored = EvalRun.objects.select_related("job__account").get(pk=run["id"])
    assert stored.job.account.name == agent.agent.cluster_account.name and stored.job.gpus == 1

    run = until(agent, lambda r: r["state"] != "queued", "evals", "show", str(run["id"]),
                seconds=300)  # fmt: skip
    assert run["state"] == "done", run["error"]
    (gsm8k,) = run["results"]
    assert gsm8k["n"] >= 5 and 0 <= gsm8k["score"] <= 1 and gsm8k["stderr"] is not None, gsm8k
    assert len(gsm8k["items"]) == gsm8k["n"]
    assert all(isinstance(item["answer"], str) for item in gsm8k["items"])
    assert (
        f"run {run['id']}: checkpoint {checkpoint} on gsm8k  done"
        in cli(agent, "evals", "show", str(run["id"])).stdout
    )

    charged = Job.objects.get(pk=stored.job_id)
    assert charged.state == "COMPLETED" and charged.gpu_seconds_charged > 0
    assert not (Path(stored.log_dir).parent / "model").exists()  # the copy is gone

    progress = read(agent, "evals", "pareto")
    assert progress["pareto"] == [str(checkpoint)] and progress["chosen"] == str(checkpoint)
    # no reference was evaluated: no benchmark qualifies, and no mean score stands in for one
    assert progress["headlines"] == {}
    assert progress["without_headline"] == {
        str(checkpoint): "no benchmark where instruct beats base"
    }
    assert progress["post_peak"] is None


def test_an_agent_cancels_its_running_evaluation_and_is_charged_for_the_time_it_ran(
    agent, tiny_models, slurm
):
    checkpoint = registered_checkpoint(agent, tiny_models)
    run = read(agent, "evals", "run", str(checkpoint), "--benchmark", "gsm8k")
    job = until(agent, lambda j: j["state"] != "PENDING", "job", run["job"], seconds=120)
    assert job["state"] == "RUNNING", job  # copying, serving or evaluating the checkpoint
    time.sleep(3)  # long enough to be charged for

    cancelled = read(agent, "evals", "cancel", str(run["id"]))
    assert cancelled["state"] == "cancelled" and cancelled["error"] == "cancelled by its agent"
    assert f"run {run['id']}: checkpoint {checkpoint} on gsm8k  cancelled" in (
        cli(agent, "evals", "show", str(run["id"])).stdout
    )
    again = cli(agent, "evals", "cancel", str(run["id"]))
    assert again.returncode == 1 and "is already cancelled" in again.stderr

    stored = EvalRun.objects.get(pk=run["id"])
    deadline = time.monotonic() + 120
    while True:  # slurmdbd books the job's end a moment after scancel
        cluster_sync(backend=slurm, account_names=[agent.agent.cluster_account])
        charged = Job.objects.get(pk=stored.job_id)
        if charged.ended_at is not None or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert charged.state == "CANCELLED" and charged.gpu_seconds_charged >= 3, charged
    assert stored.state == EvalRun.State.CANCELLED
