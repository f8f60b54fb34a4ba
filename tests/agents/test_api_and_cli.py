"""The agent API and the `arena-agent` CLI, used as an agent would: from its sandbox, as its
own Unix user, with the sandbox's own python3, against the live site and the real cluster."""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx2
import pytest
from django.urls import resolve

from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")


@pytest.fixture
def agent(arena, slurm, settings):
    settings.AGENTS_ARENA_URL = arena.url
    sandboxes = UnixSandboxes(ROOT)
    done = agent_provision(name="api_alice", sandboxes=sandboxes, backend=slurm)
    yield done
    agent_deprovision(name="api_alice", sandboxes=sandboxes, backend=slurm)


def cli(agent, *args: str) -> subprocess.CompletedProcess[str]:
    home = agent.agent.sandbox
    return subprocess.run(
        ["runuser", "-u", agent.agent.unix_user, "--", "env", f"HOME={home}", "/usr/bin/python3",
         f"{home}/.arena/bin/arena-agent", *args],
        capture_output=True, text=True, cwd=home, timeout=120, check=False,
    )  # fmt: skip


def test_an_agent_checks_its_budget_and_runs_a_job_from_its_sandbox(agent):
    budget = json.loads(cli(agent, "budget", "--json").stdout)
    assert budget["agent"] == "api_alice"
    assert budget["gpu_hours"]["limit"] == 1000 and budget["gpus_running"]["normal_limit"] == 8
    assert budget["api_credit_usd"]["left"] == 300

    submitted = cli(agent, "submit", "--wrap", "echo hello from $SLURM_JOB_ID on $CUDA_VISIBLE_DEVICES",
                    "--time", "2", "--gpus", "2", "--name", "hello", "--json")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    deadline = time.monotonic() + 90
    while True:
        job = json.loads(cli(agent, "job", job_id, "--json").stdout)
        if job["state"] == "COMPLETED":
            break
        assert time.monotonic() < deadline, job
        time.sleep(1)
    assert re.search(rf"hello from {job_id} on \d+,\d+\n", job["output_tail"]), job["output_tail"]
    listed = json.loads(cli(agent, "jobs", "--json").stdout)["jobs"]
    assert [j["id"] for j in listed] == [job_id]
    assert job_id in cli(agent, "jobs").stdout  # the table form too


def test_bad_requests_get_clear_errors_and_change_nothing(agent, arena):
    outside = cli(agent, "submit", "--wrap", "true", "--time", "1", "--workdir", "../../etc")
    assert outside.returncode == 1
    assert "outside your sandbox" in outside.stderr
    too_long = cli(agent, "submit", "--wrap", "true", "--time", str(25 * 60))
    assert "above the maximum of 24 h per job" in too_long.stderr
    too_many = cli(agent, "submit", "--wrap", "true", "--time", "1", "--gpus", "9")
    assert "at most 8 at once" in too_many.stderr
    assert "you have no job 999999" in cli(agent, "job", "999999").stderr
    assert json.loads(cli(agent, "jobs", "--json").stdout)["jobs"] == []
    assert httpx2.get(f"{arena.url}/api/v1/budget").status_code == 401
    assert (
        httpx2.get(
            f"{arena.url}/api/v1/budget", headers={"Authorization": f"Bearer {agent.proxy_token}"}
        ).status_code
        == 401
    )


def test_the_openapi_schema_describes_the_served_routes(arena):
    schema = httpx2.get(f"{arena.url}/api/v1/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    for path in schema["paths"]:
        route = path.replace("{job_id}", "123").replace("{run_id}", "7")
        assert resolve(route).url_name.startswith("api-")
    assert {op["operationId"] for ops in schema["paths"].values() for op in ops.values()} == {
        "budget", "jobs_list", "jobs_submit", "jobs_show", "jobs_cancel",
        "data_list", "data_register", "checkpoints_list", "checkpoints_register",
        "nominations_list", "nominate", "votes_export", "leaderboard", "evals",
        "eval_runs_list", "eval_runs_start", "eval_runs_show", "eval_runs_cancel",
        "journal_list", "journal_add", "trajectory_append",
    }  # fmt: skip


def test_an_agent_keeps_an_experiment_journal_from_its_sandbox(agent):
    added = cli(agent, "journal", "add", "H1: DPO beats SFT here", "--kind", "hypothesis", "--json")
    assert added.returncode == 0, added.stderr
    entry = json.loads(added.stdout)
    assert (entry["kind"], entry["text"]) == ("hypothesis", "H1: DPO beats SFT here")
    listed = json.loads(cli(agent, "journal", "list", "--json").stdout)["entries"]
    assert [e["id"] for e in listed] == [entry["id"]]
    assert "append-only" in cli(agent, "journal", "--help").stdout
