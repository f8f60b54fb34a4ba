"""Issue 12, item 5 (stop or slow the platform for anyone else): sparse files and huge trees
cost the agent nothing and the platform hours.

Before: registering a 100 GiB sparse data file hashed 100 GiB of zeros in the site's worker;
checkpoint validation copied every top-level file up to 128 MiB into root's /tmp (10,000 of
them); the nominee copy took every top-level file, writing holes out as zeros into the store;
one agent renaming folders while its sandbox was measured stopped the measurement of every
account after it; and a job's workdir was resolved by root (a link loop: a 500)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from django.test import Client

import agents.checkpoints
import cluster.services
from agents.models import Checkpoint, DataRecord, Nomination
from agents.nominees import COPIED_SETTINGS, nominee_copy_make
from agents.services import RegistrationRefused, checkpoint_register
from cluster.models import ClusterAccount
from cluster.sandbox_files import UnsafePath
from cluster.services import storage_measure_all
from tests.security.conftest import Player, bounded
from tests.security.test_hostile_checkpoints import checkpoint_of
from tests.security.test_nominee_store import nominate, phase, store  # noqa: F401 (fixtures)
from tests.security.test_sandbox_links import job_writing_to, register

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# --- data registration ---------------------------------------------------------------------


def test_a_sparse_hundred_gib_data_file_is_refused_at_once(players):
    ann = players("sec_unbounded_a")
    ann.attack(
        "truncate -s 100G ~/data.jsonl && truncate -s 20G ~/small.jsonl"
        " && mkdir ~/set && truncate -s 100G ~/set/b.jsonl"
    )

    started = time.monotonic()
    for path, refusal in (("data.jsonl", "sparse|larger than"), ("small.jsonl", "sparse"),
                          ("set", "sparse")):  # fmt: skip
        with bounded(seconds=10), pytest.raises(RegistrationRefused, match=refusal):
            register(ann, path)
    assert time.monotonic() - started < 5
    assert not DataRecord.objects.exists()


def test_a_data_folder_over_the_total_bound_is_refused_before_it_is_read(players, monkeypatch):
    ann = players("sec_unbounded_a")
    ann.attack("mkdir ~/set && for i in 1 2 3; do head -c 3145728 /dev/urandom > ~/set/$i; done")
    monkeypatch.setattr("agents.services.MAX_DATA_BYTES", 8 * 1024**2)

    with bounded(seconds=10), pytest.raises(RegistrationRefused, match="more than"):
        register(ann, "set")
    assert not DataRecord.objects.exists()


# --- checkpoint registration -----------------------------------------------------------------


def test_a_checkpoint_with_sparse_extra_files_registers_fast_and_copies_none(
    players, tiny_models, monkeypatch
):
    ann = players("sec_unbounded_b")
    checkpoint_of(ann, tiny_models / "instruct")
    # A terabyte, and extra files just under the old per-file bound (each was copied to /tmp).
    ann.attack(
        "truncate -s 1T ckpt/notes.txt && for i in 1 2 3 4 5 6; do "
        "truncate -s 120M ckpt/extra-$i.json; done"
    )
    job = job_writing_to(ann, ann.home, 61)
    probed: list[dict[str, int]] = []
    real_probe = agents.checkpoints._probe

    def probe(folder: Path, *args, **kwargs):
        probed.append({p.name: p.stat().st_size for p in folder.iterdir()})
        return real_probe(folder, *args, **kwargs)

    monkeypatch.setattr(agents.checkpoints, "_probe", probe)

    started = time.monotonic()
    with bounded(seconds=60, memory_mib=1024):
        checkpoint_register(
            agent=ann.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
        )
    assert time.monotonic() - started < 30
    assert Checkpoint.objects.count() == 1
    [copied] = probed
    assert set(copied) <= agents.checkpoints.SETTINGS_FILES, sorted(copied)
    assert sum(copied.values()) < 32 * 1024**2


def test_a_sparse_settings_file_is_refused(players, tiny_models):
    ann = players("sec_unbounded_b")
    folder = checkpoint_of(ann, tiny_models / "instruct")
    (folder / "tokenizer.model").unlink(missing_ok=True)
    ann.attack("truncate -s 100M ckpt/tokenizer.model")
    job = job_writing_to(ann, ann.home, 62)

    with bounded(seconds=30), pytest.raises(RegistrationRefused, match="sparse"):
        checkpoint_register(
            agent=ann.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
        )


# --- the nominee copy --------------------------------------------------------------------------


def test_the_nominee_copy_takes_the_weights_and_settings_only(players, phase, store, tiny_models):  # noqa: F811
    ann = players("sec_unbounded_c")
    nominate(ann, tiny_models / "instruct", 63)
    ann.attack(
        "truncate -s 1T ckpt/notes.txt && truncate -s 100M ckpt/optimizer-state.json"
        " && head -c 1048576 /dev/urandom > ckpt/extra.dat"
    )
    nomination = Nomination.objects.get(agent=ann.provisioned.agent)

    with bounded(seconds=60):
        copy = nominee_copy_make(nomination=nomination)

    assert not copy.not_servable_reason, copy.not_servable_reason
    names = set(os.listdir(copy.folder))
    assert all(n.endswith(".safetensors") or n in COPIED_SETTINGS for n in names), names
    assert {"notes.txt", "optimizer-state.json", "extra.dat"}.isdisjoint(names)


def test_nominee_weights_beyond_the_registered_parameters_are_not_copied(
    players,
    phase,  # noqa: F811
    store,  # noqa: F811
    tiny_models,
):
    ann = players("sec_unbounded_d")
    nominate(ann, tiny_models / "instruct", 64)
    Checkpoint.objects.filter(agent=ann.provisioned.agent).update(parameters=1)
    ann.attack("head -c 41943040 /dev/urandom > ckpt/model-00002-of-00002.safetensors")
    nomination = Nomination.objects.get(agent=ann.provisioned.agent)

    with bounded(seconds=60):
        copy = nominee_copy_make(nomination=nomination)

    assert "registered parameters" in copy.not_servable_reason
    assert not copy.folder


# --- storage measurement -------------------------------------------------------------------


def renaming_forever(player: Player) -> int:
    """A deep tree the agent moves between two parents in a loop, while it is measured."""
    player.attack(
        "mkdir -p a b && python3 -c '\n"
        'import os\nos.chdir("a")\n'
        "for i in range(300):\n"
        '    os.mkdir("d"); os.chdir("d")\n'
        '    for j in range(5): open(f"f{j}", "w").write("x")\n\''
    )
    done = player.shell(
        "setsid timeout 300 sh -c 'while :; do mv a/d b/d; mv b/d a/d; done' "
        ">/dev/null 2>&1 </dev/null & echo $!"
    )
    return int(done.stdout.split()[-1])


def test_an_agent_renaming_folders_stops_no_one_elses_storage_measurement(players, monkeypatch):
    ann, ben = players("sec_unbounded_e"), players("sec_unbounded_f")
    ben.attack("head -c 2097152 /dev/urandom > ~/real.bin")
    ann_name = ann.provisioned.agent.cluster_account.name
    ben_name = ben.provisioned.agent.cluster_account.name

    def check_ben(lines: dict) -> None:
        ben_account = ClusterAccount.objects.get(name=ben_name)
        assert ben_name in lines and ben_account.storage_measured_at is not None
        assert ben_account.storage_bytes_used >= 2 * 1024**2
        assert not ben_account.blocked_reason

    looping = renaming_forever(ann)
    try:
        time.sleep(0.5)
        with bounded(seconds=120):
            for _ in range(10):  # the real race: whenever it bites, only ann is affected
                check_ben({line.account: line for line in storage_measure_all()})
                if ClusterAccount.objects.get(name=ann_name).storage_blocked_reason:
                    break
    finally:
        os.killpg(looping, signal.SIGKILL)

    # The same, made certain: ann's tree is moved on every try.
    real = cluster.services.disk_usage

    def moved(where):
        if str(where).startswith(str(ann.home)):
            raise UnsafePath(f"{ann.home}/b/d was moved while it was walked")
        return real(where)

    monkeypatch.setattr(cluster.services, "disk_usage", moved)
    with bounded(seconds=60):
        check_ben({line.account: line for line in storage_measure_all()})
    ann_account = ClusterAccount.objects.get(name=ann_name)
    # The looping agent could not be measured: it is treated as over its quota, and says why.
    assert "could not be measured" in ann_account.storage_blocked_reason
    assert ann_account.blocked_reason


# --- the job's working directory ---------------------------------------------------------------


def test_a_workdir_through_a_link_loop_gets_a_json_4xx(players):
    ann = players("sec_unbounded_g")
    ann.attack("ln -s loop1 loop2 && ln -s loop2 loop1 && ln -s / root-link")
    api = Client(raise_request_exception=False)
    headers = {"Authorization": f"Bearer {ann.provisioned.api_token}"}

    for workdir in ("loop1", "loop1/x", "root-link", "root-link/etc", "../../etc"):
        with bounded(seconds=20):
            reply = api.post(
                "/api/v1/jobs", {"script": "true", "time_limit_minutes": 1, "workdir": workdir},
                content_type="application/json", headers=headers,
            )  # fmt: skip
        assert 400 <= reply.status_code < 500, (workdir, reply.status_code, reply.content[:300])
        assert json.loads(reply.content)["error"]["message"], workdir
