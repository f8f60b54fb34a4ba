"""The substitution audit and the shared-weights audit on the competition's architecture: the
tiny kit's Nemotron-H mixture of experts (Mamba-2, attention, 4 routed experts and a shared
one). The base unchanged is found however its files are saved; one changed expert is enough
not to be it; a copy of another participant's nominee is found; models genuinely trained from
the base are not flagged."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from django.utils import timezone
from transformers import AutoModelForCausalLM

from arena.competition.models import Competition, Phase
from safety.artifacts import parameter_distance
from safety.models import Finding
from safety.services import audit_run
from tests.safety.conftest import ITEMS, make_agent, nominate, register_checkpoint

pytestmark = pytest.mark.django_db

SETTINGS = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja"]  # fmt: skip


def substitution(agent):
    return Finding.objects.filter(agent=agent, kind=Finding.Kind.MODEL_SUBSTITUTION)


def saved(model, source: Path, target: Path, *, fused: bool) -> Path:
    """`model` saved as an agent's job would: transformers' saved layout (`backbone.`, each
    expert apart) or, `fused`, the loaded one (`model.`, one (E, I, H) tensor per projection)."""
    model.save_pretrained(target, save_original_format=not fused)
    for name in SETTINGS:
        shutil.copy(source / name, target / name)
    return target


def one_expert_changed(model) -> None:
    """Expert 2 of the last MoE block's down projection moved as a step of training would;
    nothing else."""
    experts = model.model.layers[3].mixer.experts.down_proj
    with torch.no_grad():
        noise = torch.randn(experts[2].shape, generator=torch.Generator().manual_seed(5))
        experts[2] += 1e-3 * noise * experts[2].norm() / noise.norm()


def test_a_copy_of_the_base_is_the_base_unchanged(root, kit_phase, tiny_nemotron_models):
    ann = make_agent(root, "ann")
    folder = shutil.copytree(tiny_nemotron_models / "base", ann.sandbox / "final")
    nominate(ann, register_checkpoint(ann, folder), kit_phase)

    audit_run(items=ITEMS)

    (finding,) = substitution(ann.agent)
    assert finding.severity == "info"
    assert "is the base model, unchanged" in finding.summary


def test_the_base_saved_anew_in_the_fused_layout_is_still_the_base_unchanged(
    root, kit_phase, tiny_nemotron_models
):
    ann = make_agent(root, "ann")
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "base")
    folder = saved(model, tiny_nemotron_models / "base", ann.sandbox / "final", fused=True)
    nominate(ann, register_checkpoint(ann, folder), kit_phase)

    audit_run(items=ITEMS)

    (finding,) = substitution(ann.agent)
    assert finding.severity == "info"
    assert "the base model, unchanged (its weights saved anew)" in finding.summary
    assert finding.evidence["shared_fraction"] == 1.0
    assert finding.evidence["base_relative_l2"] == 0


@pytest.mark.parametrize("fused", [True, False], ids=["fused layout", "saved layout"])
def test_one_changed_expert_is_enough_not_to_be_the_base(
    root, kit_phase, tiny_nemotron_models, fused
):
    ann = make_agent(root, "ann")
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "base")
    one_expert_changed(model)
    folder = saved(model, tiny_nemotron_models / "base", ann.sandbox / "final", fused=fused)
    nominate(ann, register_checkpoint(ann, folder), kit_phase)

    audit_run(items=ITEMS)

    assert not substitution(ann.agent).exists()
    distance = parameter_distance(
        folder, tiny_nemotron_models / "instruct", base=tiny_nemotron_models / "base"
    )
    assert not distance.same_as_base and distance.shared_fraction == 1.0
    assert distance.base_relative_l2 is not None and 0 < distance.base_relative_l2 < 1e-3


def test_every_tensor_of_the_moe_is_compared_in_either_layout(tmp_path, tiny_nemotron_models):
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "base")
    fused = saved(model, tiny_nemotron_models / "base", tmp_path / "fused", fused=True)
    units = len(model.state_dict()) + 2 * 2 * (4 - 1)  # 2 MoE blocks x up, down: 4 experts each

    same = parameter_distance(
        fused, tiny_nemotron_models / "base", base=tiny_nemotron_models / "base"
    )

    assert same.same_as_base and same.relative_l2 == 0 and same.shared_fraction == 1.0
    assert same.tensors == units
    for part in ("mixer.gate.weight", "mixer.A_log", "mixer.shared_experts.up_proj.weight",
                 "mixer.conv1d.weight", "embeddings.weight"):  # fmt: skip
        changed = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "base")
        name = next(n for n in changed.state_dict() if n.endswith(part))
        with torch.no_grad():
            changed.get_parameter(name).add_(1e-3)
        folder = saved(changed, tiny_nemotron_models / "base", tmp_path / part, fused=False)
        distance = parameter_distance(
            folder, tiny_nemotron_models / "base", base=tiny_nemotron_models / "base"
        )
        assert not distance.same_as_base and distance.relative_l2 > 0, part


def test_a_lightly_perturbed_instruct_reference_is_a_substitution(
    root, kit_phase, tiny_nemotron_models
):
    ben = make_agent(root, "ben")
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "instruct")
    with torch.no_grad():
        for index, parameter in enumerate(model.parameters()):
            noise = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(index))
            parameter += 1e-3 * noise * parameter.norm() / noise.norm()
    folder = saved(model, tiny_nemotron_models / "instruct", ben.sandbox / "final", fused=True)
    nominate(ben, register_checkpoint(ben, folder), kit_phase)

    audit_run(items=ITEMS)

    (finding,) = substitution(ben.agent)
    assert finding.severity == "high"
    assert finding.evidence["gap_ratio"] < 0.1 and finding.evidence["shared_fraction"] == 1.0


def test_models_trained_from_the_base_are_not_flagged(root, kit_phase, tiny_nemotron_models):
    """The markdown model: SFT from the base on other chats, as an agent's own training is."""
    cat = make_agent(root, "cat")
    folder = shutil.copytree(tiny_nemotron_models / "markdown", cat.sandbox / "final")
    nominate(cat, register_checkpoint(cat, folder), kit_phase)

    audit_run(items=ITEMS)

    assert not substitution(cat.agent).exists()
    distance = parameter_distance(
        folder, tiny_nemotron_models / "instruct", base=tiny_nemotron_models / "base"
    )
    print(f"markdown vs instruct: gap ratio {distance.gap_ratio:.3g}")
    assert distance.comparable and not distance.too_close and not distance.same_as_base


def test_the_instruct_model_is_not_flagged_where_it_is_not_the_reference(
    root, tiny_nemotron_models
):
    """Instruct against a competition whose reference is the markdown model: trained from the
    same base, in its own direction."""
    competition = Competition.objects.create(
        name="moe-md", base_model=str(tiny_nemotron_models / "base"),
        instruct_model=str(tiny_nemotron_models / "markdown"),
    )  # fmt: skip
    now = timezone.now()
    phase = Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.FROZEN,
        starts_at=now - timedelta(days=6), ends_at=now - timedelta(hours=1),
    )  # fmt: skip
    dan = make_agent(root, "dan")
    folder = shutil.copytree(tiny_nemotron_models / "instruct", dan.sandbox / "final")
    nominate(dan, register_checkpoint(dan, folder), phase)

    audit_run(items=ITEMS)

    assert not substitution(dan.agent).exists()


def test_another_participants_nominee_copied_is_found(root, kit_phase, tiny_nemotron_models):
    gus, hal = make_agent(root, "gus"), make_agent(root, "hal")
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "markdown")
    one_expert_changed(model)  # gus's own model, his training's
    own = saved(model, tiny_nemotron_models / "markdown", gus.sandbox / "final", fused=False)
    original = register_checkpoint(gus, own)
    nominate(gus, original, kit_phase)
    taken = register_checkpoint(hal, shutil.copytree(own, hal.sandbox / "final"))
    nominate(hal, taken, kit_phase)

    audit_run(items=ITEMS)

    (finding,) = Finding.objects.filter(kind=Finding.Kind.FOREIGN_ARTIFACT)
    assert finding.agent == hal.agent and finding.severity == "critical"
    assert finding.evidence["owner"]["checkpoint"] == original.pk
    assert not substitution(gus.agent).exists() and not substitution(hal.agent).exists()
