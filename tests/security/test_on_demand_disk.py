"""Issue 25, finding 9: an agent's on-demand evaluations copy its checkpoint onto the
platform's disk (VAR_DIR), outside its sandbox. Before, nothing counted those copies: an agent
could have two copies of a 400 GiB checkpoint made at once, keeping only 1 GiB free, and the
phase's freeze, copying every agent's nominee onto the same disk, failed for the others.

Now the copy is listed when the run is requested, with the copy's own checks (a sparse or
oversized file is refused there), counted against the agent's storage quota together with its
sandbox and its other queued runs' copies, and all queued copies must leave
`EVALS_AGENT_DISK_RESERVE_GIB` free; the job's copy holds to the bytes counted and the reserve.
Played by a real agent Unix user through the agent API, on a small disk of the test's own."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import NomineeCopy
from agents.nominees import NomineeRefused
from agents.services import checkpoint_register, nomination_set, token_issue
from arena.competition.models import Competition, Phase
from cluster.backends import cluster_backend
from cluster.models import ClusterAccount
from cluster.services import storage_measure
from evalsuite.checkpoint_job import checkpoint_copy
from evalsuite.models import EvalRun
from evalsuite.on_demand import checkpoint_job, freeze_room_bytes
from tests import factories
from tests.evalsuite.on_demand_builders import gpu_held
from tests.security.conftest import Player
from tests.security.test_hostile_checkpoints import checkpoint_of
from tests.security.test_nominee_store import freeze
from tests.security.test_sandbox_links import job_writing_to

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GIB = 1024**3
DISK_MIB = 1024 + 256  # room for one freeze's copy and the 1 GiB the nominee store keeps free


@pytest.fixture
def small_disk(tmp_path, settings):
    """VAR_DIR and the nominee store on one small filesystem of the test's own."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m,mode=0755", "tmpfs", disk],
                   check=True)  # fmt: skip
    settings.VAR_DIR = disk / "var"
    settings.AGENTS_NOMINEE_STORE = disk / "nominees"
    settings.CLUSTER_BACKEND = "local"
    settings.EVALS_AGENT_GPUS, settings.EVALS_AGENT_JOB_MINUTES = 1, 5
    yield disk
    subprocess.run(["umount", "-l", disk], check=True)


@pytest.fixture
def phase(small_disk):
    competition = Competition.objects.create(name="disk", base_model="", instruct_model="")
    now = timezone.now()
    return Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.RUNNING,
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=6), storage_gib=1,
    )  # fmt: skip


def registered(player: Player, source: Path, number: int):
    checkpoint_of(player, source)
    job = job_writing_to(player, player.home, 60 + number)
    return checkpoint_register(
        agent=player.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
    )


def api(player: Player, route: str, body: dict | None = None):
    token = token_issue(agent=player.provisioned.agent, kind="api")
    client = Client(headers={"Authorization": f"Bearer {token}"})
    return client.post(route, data=json.dumps(body or {}), content_type="application/json")


def evaluate(player: Player, checkpoint_id: int):
    return api(player, "/api/v1/evals/runs", {"checkpoint": checkpoint_id, "benchmarks": ["gsm8k"]})


def disk_free_set(disk: Path, free: int) -> None:
    """Resize the test's disk so that `free` bytes are free on it."""
    size = (shutil.disk_usage(disk).used + free + 4095) // 4096 * 4096
    subprocess.run(["mount", "-o", f"remount,size={size}", disk], check=True)


def copy_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def test_evaluation_copies_count_against_the_agents_quota_and_leave_room_for_the_freeze(
    players, phase, small_disk, tiny_models, settings, tmp_path
):
    ann, ben = players("sec_disk_a"), players("sec_disk_b")
    checkpoint = registered(ann, tiny_models / "instruct", 1)
    account = ClusterAccount.objects.get(pk=ann.provisioned.agent.cluster_account_id)
    assert account.storage_gib_limit == 1
    size = copy_size(ann.home / "ckpt")

    # A 300 GiB checkpoint costs the agent nothing to make: it is refused at the request.
    ann.attack("cp ckpt/model.safetensors kept && truncate -s 300G ckpt/model.safetensors")
    reply = evaluate(ann, checkpoint.pk)
    assert reply.status_code == 400, reply.content
    assert "cannot be copied for an evaluation" in reply.json()["error"]["message"]
    assert "sparse file" in reply.json()["error"]["message"]
    ann.attack("cat kept > ckpt/model.safetensors && rm kept")

    # The copy counts against the storage quota, beside what the sandbox holds.
    used = storage_measure(account=account)
    filler = (GIB - used - size // 2) // 4096 * 4096
    ann.attack(f"fallocate -l {filler} filler")
    storage_measure(account=account)
    reply = evaluate(ann, checkpoint.pk)
    assert reply.status_code == 429, reply.content
    assert "counts against your storage quota of 1 GiB" in reply.json()["error"]["message"]
    ann.attack("rm filler")
    storage_measure(account=account)
    assert not EvalRun.objects.exists()

    # Another agent's nominee waits for the freeze, onto the same disk. Queued copies leave
    # free the room that freeze may need: one copy fits, a second would cut into it.
    ben_checkpoint = registered(ben, tiny_models / "markdown", 2)
    nomination_set(
        agent=ben.provisioned.agent,
        checkpoint_id=ben_checkpoint.pk,
        model_card=factories.MODEL_CARD,
    )
    settings.EVALS_AGENT_DISK_RESERVE_GIB = 0.0  # the freeze's room only
    room = freeze_room_bytes()
    assert room >= copy_size(ben.home / "ckpt") + GIB
    disk_free_set(small_disk, room + size * 3 // 2)
    ClusterAccount.objects.filter(pk=account.pk).update(max_gpus=1)
    backend = cluster_backend()
    holder = gpu_held(account, backend, tmp_path)  # the run stays queued
    first = evaluate(ann, checkpoint.pk)
    try:
        assert first.status_code == 201 and first.json()["state"] == "queued", first.content
        run = EvalRun.objects.get(pk=first.json()["id"])
        assert run.copy_bytes == size
        second = evaluate(ann, checkpoint.pk)
        assert second.status_code == 429, second.content
        assert "too little room" in second.json()["error"]["message"]

        # The job's copy: what was counted fits; grown since, it is refused; and it never
        # cuts into the reserve as it stands when the job runs.
        workdir = Path(run.log_dir).parent
        job = checkpoint_job(run, ann.provisioned.agent, checkpoint, workdir, judge=None)
        assert job.keep_free_bytes == room
        copied = checkpoint_copy(job, into=workdir / "model")
        assert copy_size(copied) == size
        ann.attack("chmod u+w ckpt/* && head -c 4096 /dev/zero >> ckpt/model.safetensors")
        with pytest.raises(NomineeRefused, match=f"more than the {size} counted"):
            checkpoint_copy(job, into=workdir / "model")
        ann.attack("truncate -s -4096 ckpt/model.safetensors")
        settings.EVALS_AGENT_DISK_RESERVE_GIB = DISK_MIB / 1024
        job = checkpoint_job(run, ann.provisioned.agent, checkpoint, workdir, judge=None)
        with pytest.raises(NomineeRefused, match="too few for"):
            checkpoint_copy(job, into=workdir / "model")
    finally:
        if first.status_code == 201:
            api(ann, f"/api/v1/evals/runs/{first.json()['id']}/cancel")
        backend.cancel(scheduler_id=holder.scheduler_id, unix_user="")

    freeze(phase)
    copy = NomineeCopy.objects.get(nomination__agent=ben.provisioned.agent)
    assert copy.not_servable_reason == "" and small_disk in Path(copy.folder).parents
