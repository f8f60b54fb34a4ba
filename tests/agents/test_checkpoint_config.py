"""A config.json's parameters, total and active per token, from its numbers alone: exact, as
transformers counts them, for Nemotron-H (the competition's hybrid mixture of experts) and
Llama; every number the agent wrote checked before it is used."""

from __future__ import annotations

import json
import time

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from agents.checkpoint_config import ConfigInvalid, config_parameters

# The tiny kit's Nemotron-H (infra/tiny_nemotron_models): Mamba-2, MoE, attention, MoE; 4 routed
# experts, 2 per token, one shared expert.
KIT = {
    "model_type": "nemotron_h", "vocab_size": 512, "hidden_size": 128,
    "layers_block_type": ["linear_attention", "moe", "full_attention", "moe"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 1,
    "conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 128, "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 128, "intermediate_size": 384,
    "tie_word_embeddings": False,
}  # fmt: skip


def built(config: dict) -> tuple[int, int]:
    """transformers' own count, on the meta device: all parameters, and those of the routed
    experts' fused tensors."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return total, experts


@pytest.mark.parametrize(
    "changes",
    [
        {},
        # The older spelling of the blocks (M Mamba, E MoE, * attention, - MLP), with an MLP.
        {"layers_block_type": None, "hybrid_override_pattern": "ME*-ME"},
        {"layers_block_type": ["mamba", "moe", "attention", "mlp"]},
        {"moe_latent_size": 32, "mlp_bias": True, "use_bias": True, "use_conv_bias": False},
        {"tie_word_embeddings": True, "n_groups": 4, "conv_kernel": 3, "num_experts_per_tok": 1},
        {"n_routed_experts": 8, "num_experts_per_tok": 3, "moe_shared_expert_intermediate_size": 64},
    ],
    ids=["the kit", "hybrid_override_pattern", "legacy names", "latent, biases", "tied, groups", "8 experts"],
)  # fmt: skip
def test_nemotron_h_parameters_are_those_transformers_builds(changes):
    config = {k: v for k, v in {**KIT, **changes}.items() if v is not None}
    total, experts = built(config)

    count = config_parameters(config)

    assert count is not None and count.exact
    assert count.total == total
    routed, per_token = count.experts, count.experts_per_token
    assert count.active == total - experts * (routed - per_token) // routed
    assert count.layers == len(AutoConfig.for_model(**config).layers_block_type)


def test_the_kits_counts():
    count = config_parameters(KIT)
    assert count is not None
    assert (count.total, count.active) == (614_712, 483_640)
    assert (count.layers, count.moe_layers, count.experts, count.experts_per_token) == (4, 2, 4, 2)
    assert count.describe() == "614,712 parameters (483,640 active per token)"


def test_llama_parameters_are_those_transformers_builds():
    config = {
        "model_type": "llama", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 384,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    }  # fmt: skip
    for changes in ({}, {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}):
        total, _ = built({**config, **changes})
        count = config_parameters({**config, **changes})
        assert count is not None and count.exact and count.total == count.active == total


@pytest.mark.parametrize("kit", ["tiny_nemotron_models", "tiny_models"])
def test_the_built_kits_base_models_as_transformers_loads_them(kit, request):
    base = request.getfixturevalue(kit) / "base"
    model = AutoModelForCausalLM.from_pretrained(base)
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)

    count = config_parameters(json.loads((base / "config.json").read_text()))

    assert count is not None and count.total == model.num_parameters()
    if kit == "tiny_nemotron_models":
        assert model.config.model_type == "nemotron_h"
        assert count.active == count.total - routed // 2  # 2 of the 4 experts per token
    else:
        assert count.active == count.total


def test_a_mixtral_or_qwen_moe_config_gets_an_estimate_with_its_experts():
    mixtral = {
        "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    }  # fmt: skip
    count = config_parameters(mixtral)
    assert count is not None and not count.exact
    # Mixtral 8x7B: 46.7 B parameters, 12.9 B active.
    assert count.total == pytest.approx(46.7e9, rel=0.02)
    assert count.active == pytest.approx(12.9e9, rel=0.02)
    qwen = {**mixtral, "model_type": "qwen2_moe", "num_local_experts": None, "num_experts": 60,
            "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632}  # fmt: skip
    count = config_parameters(qwen)
    assert count is not None and count.experts == 60 and count.active < count.total


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok 5 is more than the 4"),
        ({"n_routed_experts": 10**9}, "n_routed_experts must be a whole number from 1 to 4096"),
        ({"n_routed_experts": 0}, "n_routed_experts must be a whole number"),
        ({"moe_intermediate_size": -1}, "moe_intermediate_size must be a whole number"),
        ({"moe_intermediate_size": 1.5}, "moe_intermediate_size must be a whole number"),
        ({"mamba_num_heads": 10**30}, "mamba_num_heads must be a whole number"),
        ({"n_groups": 3}, "not a multiple of n_groups 3"),
        ({"layers_block_type": ["moe"] * 100_000}, "a list of 1 to 1024 block kinds"),
        ({"layers_block_type": "moe"}, "a list of 1 to 1024 block kinds"),
        ({"layers_block_type": ["moe", {"x": 1}]}, "each of layers_block_type must be one of"),
        ({"layers_block_type": None, "hybrid_override_pattern": "M" * 10**6}, "1 to 1024 of the letters"),
        ({"layers_block_type": None, "hybrid_override_pattern": "MEX"}, "1 to 1024 of the letters"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        ({"num_attention_heads": 3}, "not a multiple of num_key_value_heads"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_a_moe_config_that_lies_or_is_absurd_is_refused_at_once(changes, message):
    config = {k: v for k, v in {**KIT, **changes}.items() if v is not None}
    started = time.monotonic()
    with pytest.raises(ConfigInvalid, match=message):
        config_parameters(config)
    assert time.monotonic() - started < 0.5


def test_a_generic_moe_config_with_more_experts_per_token_than_experts_is_refused():
    with pytest.raises(ConfigInvalid, match="num_experts_per_tok 9 is more than the 8"):
        config_parameters(
            {"model_type": "mixtral", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
             "num_local_experts": 8, "num_experts_per_tok": 9}
        )  # fmt: skip
