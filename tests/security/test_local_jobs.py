"""Attacks on the local cluster backend (the demo's default), played by a real agent Unix user.

Before: every job ran as root with the platform's whole environment, its output file was opened
by root through whatever the agent had planted at `slurm-<id>.out`, and cancelling a job killed
only the wrapper around it.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster.backends.base import MAX_QUEUED_JOBS, AccountLimits, JobRequest, SubmitRefused
from cluster.backends.local import LocalBackend
from cluster.services import account_ensure, job_cancel, job_submit
from tests.cluster.conftest import wait_for_state
from tests.support.workers import worker_path

pytestmark = pytest.mark.django_db

LIMITS = AccountLimits(gpu_hours=10.0, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)
SANDBOXES = worker_path("/tmp/arena-security-local")
USER = "sec_local_mallory"


@pytest.fixture
def mallory() -> Path:
    """A real agent Unix user with its 0700 sandbox."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", USER], check=True)
    home = SANDBOXES / USER
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    SANDBOXES.chmod(0o755)
    shutil.chown(home, user=USER, group=USER)
    home.chmod(0o700)
    yield home
    subprocess.run(["pkill", "-KILL", "-u", USER], check=False)


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(log_dir=tmp_path / "scheduler")  # root's, mode 0700 like var/


@pytest.fixture
def account(backend: LocalBackend):
    return account_ensure(
        name="agent_mallory", unix_user=USER, period="p", limits=LIMITS, storage_gib=1,
        backend=backend,
    )  # fmt: skip


def as_mallory(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", USER, "--", *command], capture_output=True, text=True, check=False
    )


def submit(backend, account, workdir: Path, script: str, minutes: int = 1):
    request = JobRequest(
        name="job", script=script, nodes=1, gpus_per_node=1, time_limit_minutes=minutes,
        preemptible=False, workdir=workdir,
    )  # fmt: skip
    return job_submit(account=account, request=request, backend=backend)


def test_an_agents_job_runs_as_the_agent_with_a_login_environment(
    backend, account, mallory, monkeypatch
):
    monkeypatch.setenv("ARENA_SECRET_KEY", "platform-secret-canary")
    job = submit(
        backend, account, mallory,
        "id -un; echo home=$HOME; env | grep -c ARENA_SECRET_KEY; cat /etc/shadow; echo gpus=$CUDA_VISIBLE_DEVICES",
    )  # fmt: skip
    wait_for_state(job, {"COMPLETED", "FAILED"}, backend=backend, timeout_s=30)
    output = (mallory / f"slurm-{job.scheduler_id}.out").read_text()
    assert output.splitlines()[0] == USER
    assert f"home={pwd.getpwnam(USER).pw_dir}" in output
    assert "platform-secret-canary" not in output
    assert output.splitlines()[2] == "0", "the platform's environment does not reach the job"
    assert "Permission denied" in output, "root-only files stay root's"
    assert "gpus=0" in output
    assert (mallory / f"slurm-{job.scheduler_id}.out").owner() == USER


def test_a_planted_output_link_is_followed_with_the_agents_rights_only(
    backend, account, mallory, tmp_path
):
    canary = tmp_path / "root-only-canary"
    canary.write_text("root's\n")
    canary.chmod(0o644)
    # The next job's id is predictable: mallory links its output file to a root-owned file.
    assert as_mallory("ln", "-s", str(canary), str(mallory / "slurm-1.out")).returncode == 0
    job = submit(backend, account, mallory, "echo overwritten")
    assert job.scheduler_id == "1"
    wait_for_state(job, {"COMPLETED", "FAILED"}, backend=backend, timeout_s=30)
    assert canary.read_text() == "root's\n"
    assert canary.owner() == "root"


def test_cancelling_a_job_ends_every_process_it_started(backend, account, mallory):
    job = submit(
        backend, account, mallory,
        "sleep 300 & (sleep 301 &) ; echo started; wait",
    )  # fmt: skip
    wait_for_state(job, {"RUNNING"}, backend=backend, timeout_s=30)
    deadline = time.monotonic() + 20
    while "started" not in _read(mallory / f"slurm-{job.scheduler_id}.out"):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    assert _processes_of(USER)
    job_cancel(job=job, backend=backend)
    deadline = time.monotonic() + 20
    while _processes_of(USER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_of(USER), "a cancelled job's processes outlived it"
    wait_for_state(job, {"CANCELLED"}, backend=backend, timeout_s=20)


def test_cancel_everything_stops_every_account_and_waits_for_the_processes(
    backend, account, mallory
):
    jobs = [submit(backend, account, mallory, "trap '' TERM; sleep 300") for _ in range(2)]
    for job in jobs:
        wait_for_state(job, {"RUNNING"}, backend=backend, timeout_s=30)
    cancelled = backend.cancel_everything(grace_s=2)
    assert sorted(cancelled) == sorted(j.scheduler_id for j in jobs)
    assert not _processes_of(USER), "SIGKILL follows a job that ignores SIGTERM"


def test_a_cancel_before_the_wrapper_records_the_jobs_pid_still_stops_the_job(
    backend, account, mallory
):
    """A job is RUNNING as soon as its wrapper starts, and the wrapper records the job's pid only
    after launching it. A cancel in between signalled the wrapper alone: the job, in a process
    group of its own, outlived it and was never killed (CI caught it under load). Removing the
    recorded pid puts the job back in that moment, deterministically."""
    job = submit(backend, account, mallory, "trap '' TERM; sleep 300")
    folder = backend.root / "jobs" / job.scheduler_id
    deadline = time.monotonic() + 30
    while not (folder / "job-pid").exists() or not _processes_of(USER):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    (folder / "job-pid").unlink()
    assert backend.cancel_everything(grace_s=2) == [job.scheduler_id]
    assert not _processes_of(USER), "the job outlived a cancel that came before its pid was known"


@pytest.mark.parametrize("variable", ["BASH_ENV", "ENV", "LD_PRELOAD", "PATH"])
def test_a_jobs_variables_never_reach_the_schedulers_root_shell(
    backend, account, mallory, tmp_path, variable
):
    """The red team's probe: a job's BASH_ENV made the wrapper source the agent's file as root."""
    traps = tmp_path / "traps"
    traps.mkdir(mode=0o777)
    traps.chmod(0o777)
    payload = mallory / "payload.sh"
    payload.write_text(f"id -u >> {traps}/ran-as-$(id -u)\n")
    payload.chmod(0o755)
    shutil.chown(payload, user=USER, group=USER)
    shim = mallory / "bin"
    shim.mkdir()
    for name in ("date", "timeout", "setpriv", "bash", "env"):  # a PATH the agent fills
        (shim / name).write_text(f'#!/bin/sh\n{payload}\nexec /usr/bin/{name} "$@"\n')
        (shim / name).chmod(0o755)
    value = {"BASH_ENV": str(payload), "ENV": str(payload), "PATH": f"{shim}:/usr/bin:/bin",
             "LD_PRELOAD": str(mallory / "evil.so")}[variable]  # fmt: skip
    request = JobRequest(
        name="job", script="true", nodes=1, gpus_per_node=1, time_limit_minutes=1,
        preemptible=False, workdir=mallory, env={variable: value},
    )  # fmt: skip
    job = job_submit(account=account, request=request, backend=backend)
    wait_for_state(job, {"COMPLETED", "FAILED"}, backend=backend, timeout_s=30)
    assert not (traps / "ran-as-0").exists(), "the agent's variable ran code as root"


def test_a_job_that_cannot_start_fails_alone(backend, account, mallory):
    """A waiting job that can no longer be launched (its user was removed meanwhile, say) fails
    by itself; it must not jam the scheduler for every account, as it did."""
    holder = submit_gpus(backend, account, mallory, "sleep 300", gpus=8)
    wait_for_state(holder, {"RUNNING"}, backend=backend, timeout_s=30)
    doomed = submit_gpus(backend, account, mallory, "true", gpus=1)  # waits for a GPU
    meta_path = backend.root / "jobs" / doomed.scheduler_id / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["unix_user"] = "no_such_user_left"
    meta_path.write_text(json.dumps(meta))
    job_cancel(job=holder, backend=backend)
    wait_for_state(doomed, {"FAILED"}, backend=backend, timeout_s=30)
    other = submit(backend, account, mallory, "echo still scheduling")
    wait_for_state(other, {"COMPLETED"}, backend=backend, timeout_s=30)


def submit_gpus(backend, account, workdir: Path, script: str, *, gpus: int):
    request = JobRequest(
        name="job", script=script, nodes=1, gpus_per_node=gpus, time_limit_minutes=5,
        preemptible=False, workdir=workdir,
    )  # fmt: skip
    return job_submit(account=account, request=request, backend=backend)


def test_an_environment_variable_name_the_shell_cannot_hold_is_refused(backend, account, mallory):
    request = JobRequest(
        name="job", script="true", nodes=1, gpus_per_node=1, time_limit_minutes=1,
        preemptible=False, workdir=mallory, env={"A=B": "1"},
    )  # fmt: skip
    with pytest.raises(SubmitRefused, match="invalid environment"):
        backend.submit(account="agent_mallory", unix_user=USER, request=request)


def test_an_agent_cannot_fill_the_local_queue(account, mallory, tmp_path):
    assert MAX_QUEUED_JOBS == 200  # the same cap as on Slurm
    backend = LocalBackend(log_dir=tmp_path / "small-queue", max_queued=5)
    account_ensure(
        name="agent_mallory", unix_user=USER, period="p", limits=LIMITS, storage_gib=1,
        backend=backend,
    )  # fmt: skip
    holder = submit_gpus(backend, account, mallory, "sleep 300", gpus=8)
    for _ in range(4):  # each waits for the holder's GPUs
        submit_gpus(backend, account, mallory, "true", gpus=1)
    with pytest.raises(SubmitRefused, match="most jobs it may have queued"):
        submit_gpus(backend, account, mallory, "true", gpus=1)
    job_cancel(job=holder, backend=backend)


def test_a_python_callable_never_runs_as_an_agent(backend, account, mallory):
    with pytest.raises(SubmitRefused, match="platform's own user"):
        backend.submit_callable(
            account="agent_mallory", unix_user=USER,
            request=JobRequest(name="c", script="", nodes=1, gpus_per_node=0,
                               time_limit_minutes=1, preemptible=False, workdir=mallory),
            function=print, args=(), kwargs={},
        )  # fmt: skip


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _processes_of(user: str) -> list[str]:
    uid = pwd.getpwnam(user).pw_uid
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and "Z" not in _state(entry):
                    found.append(entry.name)
            except OSError:
                continue
    return found


def _state(entry: Path) -> str:
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[0]
