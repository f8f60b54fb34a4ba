"""Checkpoint validation on the tiny kits' real checkpoints: a Nemotron-H mixture of experts
(the default kit) and the dense Llama. It reports the parameters in all and per token, accepts
both layouts transformers writes a MoE in, and refuses a config whose experts the weights do
not hold before anything is built."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from agents.checkpoints import CheckpointInvalid, as_loaded, inspect_checkpoint

SETTINGS = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja"]  # fmt: skip


def copy_of(model: Path, where: Path) -> Path:
    return Path(shutil.copytree(model, where))


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v != ...}))


def header_names(folder: Path) -> list[str]:
    raw = (folder / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return [n for n in json.loads(raw[8 : 8 + length]) if n != "__metadata__"]


def test_a_nemotron_h_checkpoint_reports_its_total_and_active_parameters(
    tiny_nemotron_models, tmp_path
):
    folder = copy_of(tiny_nemotron_models / "instruct", tmp_path / "ckpt")
    model = AutoModelForCausalLM.from_pretrained(folder)
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)

    facts = inspect_checkpoint(folder)

    assert facts.architecture == "NemotronHForCausalLM"
    assert facts.parameters == model.num_parameters() == 614_712
    assert facts.active_parameters == facts.parameters - routed // 2 == 483_640
    assert facts.end_of_turn_token == "<|im_end|>"
    # As transformers saved it: `backbone.`, each expert apart; validated in the loaded layout.
    assert "backbone.layers.1.mixer.experts.3.up_proj.weight" in header_names(folder)


def test_a_llama_checkpoint_reports_the_same_total_and_active(tiny_models, tmp_path):
    folder = copy_of(tiny_models / "instruct", tmp_path / "ckpt")
    facts = inspect_checkpoint(folder)
    assert facts.architecture == "LlamaForCausalLM"
    assert facts.parameters == facts.active_parameters == 853_120


def test_a_nemotron_h_checkpoint_in_the_loaded_layout_is_accepted_too(
    tiny_nemotron_models, tmp_path
):
    """An agent may save without transformers' conversion (save_original_format=False, or its
    own state_dict): `model.`, the experts fused in one (E, I, H) tensor."""
    model = AutoModelForCausalLM.from_pretrained(tiny_nemotron_models / "base")
    fused = tmp_path / "fused"
    model.save_pretrained(fused, save_original_format=False)
    for name in SETTINGS:
        shutil.copy(tiny_nemotron_models / "base" / name, fused / name)
    assert "model.layers.1.mixer.experts.up_proj" in header_names(fused)
    reloaded = AutoModelForCausalLM.from_pretrained(fused)  # transformers reads it: so must we
    assert torch.equal(
        reloaded.model.layers[1].mixer.experts.up_proj, model.model.layers[1].mixer.experts.up_proj
    )

    facts = inspect_checkpoint(fused)

    assert (facts.parameters, facts.active_parameters) == (614_712, 483_640)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_routed_experts": 8}, "describes 8 routed experts per MoE layer; the weights hold 4"),
        ({"n_routed_experts": 4000, "moe_intermediate_size": 4096}, "more than the .* allowed|the weights hold"),
        ({"num_experts_per_tok": 6}, "num_experts_per_tok 6 is more than the 4"),
        ({"n_routed_experts": 10**12}, "n_routed_experts must be a whole number"),
        ({"layers_block_type": ["moe"] * 1000}, "describes 1000 layers; the weights hold 4"),
        ({"layers_block_type": ..., "hybrid_override_pattern": "ME*E" * 200}, "describes 800 layers; the weights hold 4"),
        ({"moe_intermediate_size": 256}, "experts.up_proj has shape \\(4, 128, 128\\), the config needs \\(4, 256, 128\\)"),
    ],
    ids=["more experts than weights", "a huge MoE", "more per token than experts",
         "absurd experts", "a thousand layers over four", "a long pattern", "wider experts"],
)  # fmt: skip
def test_a_moe_config_that_lies_about_its_experts_is_refused(
    tiny_nemotron_models, tmp_path, changes, message
):
    folder = copy_of(tiny_nemotron_models / "instruct", tmp_path / "ckpt")
    edit_config(folder, **changes)
    started = time.monotonic()
    with pytest.raises(CheckpointInvalid, match=message):
        inspect_checkpoint(folder)
    assert time.monotonic() - started < 30


def test_the_same_checkpoint_in_the_older_pattern_spelling_has_the_same_counts(
    tiny_nemotron_models, tmp_path
):
    folder = copy_of(tiny_nemotron_models / "base", tmp_path / "ckpt")
    edit_config(folder, layers_block_type=..., hybrid_override_pattern="ME*E")
    facts = inspect_checkpoint(folder)
    assert (facts.parameters, facts.active_parameters) == (614_712, 483_640)


def test_weights_missing_one_expert_are_refused(tiny_nemotron_models, tmp_path):
    folder = copy_of(tiny_nemotron_models / "base", tmp_path / "ckpt")
    weights = load_file(folder / "model.safetensors")
    del weights["backbone.layers.3.mixer.experts.2.down_proj.weight"]
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(
        CheckpointInvalid,
        match="missing for 1 tensors, e.g. model.layers.3.mixer.experts.down_proj",
    ):
        inspect_checkpoint(folder)


def test_as_loaded_converts_only_into_names_the_model_has():
    expected = {"model.embeddings.weight": (8, 4), "model.layers.0.mixer.experts.up_proj": (2, 3, 4),
                "model.layers.0.mlp.experts.gate_up_proj": (2, 6, 4)}  # fmt: skip
    found = {
        "backbone.embeddings.weight": (8, 4),
        "backbone.layers.0.mixer.experts.0.up_proj.weight": (3, 4),
        "backbone.layers.0.mixer.experts.1.up_proj.weight": (3, 4),
        "backbone.layers.0.mlp.experts.0.gate_proj.weight": (3, 4),
        "backbone.layers.0.mlp.experts.1.gate_proj.weight": (3, 4),
        "backbone.layers.0.mlp.experts.0.up_proj.weight": (3, 4),
        "backbone.layers.0.mlp.experts.1.up_proj.weight": (3, 4),
        # expert 1 missing: left per expert, to be found missing
        "backbone.layers.1.mixer.experts.0.down_proj.weight": (4, 3),
        "backbone.layers.1.mixer.experts.00000000000000000000000000002.down_proj.weight": (4, 3),
    }
    assert as_loaded(found, expected) == {
        "model.embeddings.weight": (8, 4),
        "model.layers.0.mixer.experts.up_proj": (2, 3, 4),
        "model.layers.0.mlp.experts.gate_up_proj": (2, 6, 4),
        "model.layers.1.mixer.experts.0.down_proj.weight": (4, 3),
        "model.layers.1.mixer.experts.00000000000000000000000000002.down_proj.weight": (4, 3),
    }


def test_a_nemotron_h_head_left_out_as_tied_is_missing(tiny_nemotron_models, tmp_path):
    """Nemotron-H (transformers 5) never ties its head, whatever the config says: a checkpoint
    without one would be served with a random head."""
    folder = copy_of(tiny_nemotron_models / "base", tmp_path / "ckpt")
    edit_config(folder, tie_word_embeddings=True)
    weights = load_file(folder / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(CheckpointInvalid, match="missing for 1 tensors, e.g. lm_head.weight"):
        inspect_checkpoint(folder)
