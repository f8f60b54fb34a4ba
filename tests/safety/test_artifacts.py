"""Model substitution (by hash and by parameter distance) and another participant's artifacts
(data shards, weights) are found; a genuinely trained model and own data are not."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file

from safety.artifacts import parameter_distance
from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import (
    ITEMS,
    make_agent,
    moved,
    nominate,
    register_checkpoint,
    register_data,
    tensors,
    write_checkpoint,
)

pytestmark = pytest.mark.django_db


def substitution(agent):
    return Finding.objects.filter(agent=agent, kind=Finding.Kind.MODEL_SUBSTITUTION)


def test_the_instruct_reference_nominated_as_is_is_a_substitution(root, phase, references):
    ann = make_agent(root, "ann")
    copy = shutil.copytree(references["instruct"], ann.sandbox / "final")
    nominate(ann, register_checkpoint(ann, copy), phase)

    audit_run(items=ITEMS)

    (finding,) = substitution(ann.agent)
    assert finding.severity == "critical" and finding.phase == phase
    assert "instruct reference, byte for byte" in finding.summary
    assert finding.evidence["reference"] == str(references["instruct"])


def test_nearly_identical_weights_are_a_substitution_and_trained_ones_are_not(
    root, phase, references
):
    instruct = load_file(references["instruct"] / "model.safetensors")
    base = load_file(references["base"] / "model.safetensors")
    ben, cat = make_agent(root, "ben"), make_agent(root, "cat")
    # ben perturbs the instruct reference a little; cat trains the base as much as instruct did.
    disguised = write_checkpoint(ben.sandbox / "final", moved(instruct, seed=7, size=1e-3))
    trained = write_checkpoint(cat.sandbox / "final", moved(base, seed=8, size=0.05))
    nominate(ben, register_checkpoint(ben, disguised), phase)
    nominate(cat, register_checkpoint(cat, trained), phase)

    audit_run(items=ITEMS)

    (finding,) = substitution(ben.agent)
    assert finding.severity == "high"
    assert finding.evidence["gap_ratio"] < 0.1 and finding.evidence["shared_fraction"] == 1.0
    assert not substitution(cat.agent).exists()


def test_parameter_distance_without_a_base_falls_back_to_relative_l2(tmp_path, references):
    instruct = load_file(references["instruct"] / "model.safetensors")
    near = write_checkpoint(tmp_path / "near", moved(instruct, seed=3, size=1e-3))
    far = write_checkpoint(tmp_path / "far", moved(instruct, seed=3, size=0.05))

    close = parameter_distance(near, references["instruct"])
    assert close.gap_ratio is None and close.relative_l2 == pytest.approx(1e-3, rel=0.05)
    assert close.too_close
    assert not parameter_distance(far, references["instruct"]).too_close

    with_base = parameter_distance(far, references["instruct"], base=references["base"])
    assert with_base.gap_ratio == pytest.approx(1.0, rel=0.05) and not with_base.too_close


def test_tensors_that_do_not_match_are_not_compared(tmp_path, references):
    instruct = load_file(references["instruct"] / "model.safetensors")
    renamed = {f"other.{k}": v for k, v in instruct.items()}
    distance = parameter_distance(write_checkpoint(tmp_path / "x", renamed), references["instruct"])
    assert distance.shared_fraction == 0 and not distance.comparable and not distance.too_close


def test_a_copy_of_another_agents_data_shard_is_found_for_the_copier_only(root):
    dan, eve, fay = make_agent(root, "dan"), make_agent(root, "eve"), make_agent(root, "fay")
    shard = dan.sandbox / "shard-000.jsonl"
    shard.write_text("".join(f'{{"text": "dan wrote example number {i}"}}\n' for i in range(300)))
    register_data(dan, shard, sources=["generated:dan"])
    # eve copies it (and registers it as her own); fay has her own, different data.
    copied = shutil.copy(shard, eve.sandbox / "mine.jsonl")
    register_data(eve, copied, sources=["generated:eve"])
    own = fay.sandbox / "shard-000.jsonl"
    own.write_text("".join(f'{{"text": "fay wrote example number {i}"}}\n' for i in range(300)))
    register_data(fay, own, sources=["generated:fay"])

    audit_run(items=ITEMS)

    (finding,) = Finding.objects.filter(kind=Finding.Kind.FOREIGN_ARTIFACT)
    assert finding.agent == eve.agent and finding.severity == "high"
    assert finding.evidence["owner"]["agent"] == "dan"
    assert finding.evidence["owner"]["paths"] == [str(shard)]
    assert {c["path"] for c in finding.evidence["copies"]} == {str(copied)}


def test_an_unregistered_copy_in_a_sandbox_is_found_too(root):
    dan, eve = make_agent(root, "dan"), make_agent(root, "eve")
    shard = dan.sandbox / "shard.csv"
    shard.write_text("".join(f"{i},dan's row {i}\n" for i in range(500)))
    register_data(dan, shard)
    (eve.sandbox / "stolen").mkdir()
    shutil.copy(shard, eve.sandbox / "stolen" / "rows.csv")

    audit_run(items=ITEMS, agent_names=["eve"])

    (finding,) = Finding.objects.filter(kind=Finding.Kind.FOREIGN_ARTIFACT)
    assert finding.agent == eve.agent
    assert finding.evidence["copies"][0] == {
        "path": str(eve.sandbox / "stolen" / "rows.csv"),
        "since": finding.evidence["copies"][0]["since"],
        "registered": False,
    }


def test_another_agents_checkpoint_registered_as_ones_own_is_found(root, phase):
    gus, hal = make_agent(root, "gus"), make_agent(root, "hal")
    weights = tensors(seed=11)
    original = register_checkpoint(gus, write_checkpoint(gus.sandbox / "ckpt", weights))
    taken = register_checkpoint(hal, write_checkpoint(hal.sandbox / "ckpt", weights))
    nominate(hal, taken, phase)

    audit_run(items=ITEMS)

    (finding,) = Finding.objects.filter(kind=Finding.Kind.FOREIGN_ARTIFACT)
    assert finding.agent == hal.agent and finding.severity == "critical"
    assert finding.evidence["owner"]["checkpoint"] == original.pk
