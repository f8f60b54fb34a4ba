"""`cluster.memory_plan` and `manage.py models plan`: the census of a hub config built on the meta
device, the bytes per GPU of each way to train or serve it, and the refusal of bad configs.

The real 30B-A3B config (hub_configs/, see its README) is held to NVIDIA's published figures
and to a count by hand from its own numbers; the tiny models are held to their real
checkpoints, and the static formula to the bytes one real AdamW step leaves on CPU."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import torch
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster.memory_plan import (
    FP32,
    GIB,
    MAX_CONFIG_BYTES,
    Census,
    PlanError,
    PlanOptions,
    census,
    memory_plan,
    read_hub_config,
)

NANO_30B = Path(__file__).parent / "hub_configs" / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B"


@pytest.fixture(scope="module")
def nano() -> Census:
    return census(read_hub_config(NANO_30B))


def test_the_30b_config_counts_nvidias_published_parameters(nano):
    # NVIDIA: "31.6B total parameters, 3.2B active (3.6B with embeddings)".
    assert nano.total == pytest.approx(31.6e9, rel=0.005)
    assert nano.active == pytest.approx(3.6e9, rel=0.01)
    assert nano.active - nano.input_embedding == pytest.approx(3.2e9, rel=0.015)
    assert (nano.experts, nano.experts_per_token) == (128, 6)
    assert (nano.layers, nano.attention_layers, nano.mamba_layers) == (52, 6, 23)


def test_the_30b_census_equals_a_count_by_hand_from_the_config(nano):
    c = json.loads((NANO_30B / "config.json").read_text())
    h, vocab = c["hidden_size"], c["vocab_size"]
    pattern = c["hybrid_override_pattern"]
    heads, head_dim = c["mamba_num_heads"], c["mamba_head_dim"]
    inner = heads * head_dim
    conv = inner + 2 * c["n_groups"] * c["ssm_state_size"]
    mamba = h * (inner + conv + heads) + conv * c["conv_kernel"] + conv + 3 * heads + inner
    mamba += inner * h  # in_proj, conv1d weight and bias, dt_bias A_log D, gated norm, out_proj
    kv = c["num_key_value_heads"] * c["head_dim"]
    attention = 2 * h * c["num_attention_heads"] * c["head_dim"] + 2 * h * kv
    experts = c["n_routed_experts"] * 2 * h * c["moe_intermediate_size"]  # up, down (no gate)
    expected = {
        "embeddings/head": 2 * vocab * h,  # untied
        "Mamba": pattern.count("M") * mamba,
        "attention": pattern.count("*") * attention,
        "routed experts": pattern.count("E") * experts,
        "shared experts": pattern.count("E") * 2 * h * c["moe_shared_expert_intermediate_size"],
        "router": pattern.count("E") * c["n_routed_experts"] * h,
        "norms": (len(pattern) + 1) * h,  # one per block and the final one
    }
    assert {k: v for k, v in nano.by_kind.items() if v} == expected
    assert nano.total == sum(expected.values())


def test_what_fits_the_30b_on_8_x_80_gib(nano):
    plan = memory_plan(nano, PlanOptions(gpus=8, gpu_memory_gib=80))
    fits = {s.strategy: s.fits for s in plan.strategies}
    assert fits == {
        "full SFT, FSDP2": True,
        "full SFT, ZeRO-2": False,  # a whole bf16 copy (59 GiB) on every GPU, then the rest
        "full SFT, ZeRO-3": True,
        "LoRA r=16, DDP": True,
        "LoRA r=16, FSDP2": True,
        "vLLM, TP=1": False,  # 256 sequences of 4096 tokens do not fit beside 59 GiB of weights
    }
    # 16 bytes a parameter in all, shared by 8 GPUs, whichever sharding does it.
    for name in ("full SFT, FSDP2", "full SFT, ZeRO-3"):
        assert plan.strategy(name).static * 8 == pytest.approx(16 * nano.total, rel=1e-6)
    assert plan.strategy("full SFT, ZeRO-2").weights == 2 * nano.total
    assert 0 < plan.sequences_that_fit < 256
    assert memory_plan(nano, PlanOptions(tensor_parallel=2)).strategy("vLLM").fits
    assert not memory_plan(nano, PlanOptions(gpus=1)).strategy("full SFT, FSDP2").fits


def test_the_serving_cache_is_kv_for_attention_and_a_fixed_state_for_mamba(nano):
    one = memory_plan(nano, PlanOptions(max_num_seqs=1, seq_len=1024)).strategy("vLLM")
    longer = memory_plan(nano, PlanOptions(max_num_seqs=1, seq_len=2048)).strategy("vLLM")
    kv_per_token = 6 * 2 * 2 * 128 * 2  # 6 layers, K and V, 2 heads of 128, bf16
    mamba_per_sequence = 23 * (6144 * 3 * 2 + 64 * 64 * 128 * 4)  # conv window bf16, SSM fp32
    assert one.cache == 1024 * kv_per_token + mamba_per_sequence
    assert longer.cache - one.cache == 1024 * kv_per_token
    assert one.budget == int(0.9 * 80 * GIB)


def _kit(request, name: str) -> Path:
    return request.getfixturevalue(name) / "base"


KITS = ["tiny_nemotron_models", "tiny_models"]


@pytest.mark.parametrize("kit", KITS)
def test_the_census_of_a_tiny_model_is_its_checkpoints_parameter_count(request, kit):
    from transformers import AutoModelForCausalLM

    base = _kit(request, kit)
    counted = census(read_hub_config(base))
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    assert counted.total == sum(p.numel() for p in model.parameters())
    assert counted.tensors == len(list(model.parameters()))
    if kit == "tiny_nemotron_models":  # Nemotron-H: 4 routed experts, 2 a token
        assert counted.by_kind["Mamba"] and counted.by_kind["attention"]
        routed = counted.by_kind["routed experts"]
        assert routed and counted.active == counted.total - routed // 4 * 2
    else:
        assert counted.by_kind["dense MLP"] and counted.active == counted.total


def _held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    params = sum(p.nbytes for p in model.parameters())
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    states = sum(
        t.nbytes for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)
    )
    return params + grads + states


def _one_step(model: torch.nn.Module) -> torch.optim.Optimizer:
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    model.train()
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    assert all(p.grad is not None for p in trainable)  # else AdamW would keep no state for it
    return optimizer


@pytest.mark.parametrize("kit", KITS)
def test_one_adamw_step_holds_exactly_the_planned_static_bytes(request, kit):
    from transformers import AutoModelForCausalLM

    base = _kit(request, kit)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    held = _held_bytes(model, _one_step(model))
    plan = memory_plan(census(read_hub_config(base)), PlanOptions(gpus=1, precision=FP32))
    for name in ("full SFT, FSDP2", "full SFT, ZeRO-2", "full SFT, ZeRO-3"):
        assert plan.strategy(name).static == held, name


@pytest.mark.parametrize("kit", KITS)
def test_lora_adapters_hold_exactly_the_planned_bytes(request, kit):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = _kit(request, kit)
    torch.manual_seed(0)
    counted = census(read_hub_config(base))
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    targets = list(counted.lora_targets)
    if kit == "tiny_nemotron_models":  # attention, Mamba's in_proj, the shared experts; no out_proj
        assert targets == [
            "down_proj",
            "in_proj",
            "k_proj",
            "o_proj",
            "q_proj",
            "up_proj",
            "v_proj",
        ]
    model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == 4 * counted.lora_width
    held = _held_bytes(model, _one_step(model))
    options = PlanOptions(gpus=1, precision=FP32, lora_rank=4)
    assert memory_plan(counted, options).strategy("LoRA r=4, DDP").static == held


@pytest.mark.parametrize(
    ("model_type", "extra"),
    [
        ("mixtral", {"num_local_experts": 4, "intermediate_size": 48}),
        ("qwen3_moe", {"num_experts": 4, "moe_intermediate_size": 48, "intermediate_size": 96}),
    ],
)
def test_a_generic_moe_counts_its_routed_experts(tmp_path, model_type, extra):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {
        "model_type": model_type, "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "num_experts_per_tok": 2, **extra,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    counted = census(read_hub_config(tmp_path))
    real = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert counted.total == sum(p.numel() for p in real.parameters())
    experts = 2 * 4 * 3 * 32 * 48  # layers x experts x (gate, up, down) x hidden x width
    assert counted.by_kind["routed experts"] == experts
    assert counted.active == counted.total - experts // 4 * 2
    assert counted.by_kind["router"] == 2 * 4 * 32


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"model_type": "llama", "x": "' + "a" * MAX_CONFIG_BYTES + '"}', "larger than"),
        ("model_type = llama", "not JSON"),
        ('["llama"]', "JSON list, not an object"),
        ('{"model_type": "llama", "hidden_size": NaN}', "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        ('{"model_type": "no_such_model", "hidden_size": 64}', "unknown model_type"),
        ('{"hidden_size": 64}', "no model_type"),
        ('{"model_type": "llama", "hidden_size": -64}', "hidden_size is -64: a size cannot be"),
        ('{"model_type": "llama", "text_config": {"vocab_size": -1}}', "text_config.vocab_size"),
        ('{"model_type": "llama", "num_hidden_layers": 1000000}', "refused as absurd"),
        ('{"model_type": "llama", "intermediate_size": 1e12}', "a whole number"),
        ('{"model_type": "mixtral", "num_local_experts": 100000}', "refused as absurd"),
        ('{"model_type": "llama", "hidden_size": 64, "num_key_value_heads": 0}', "cannot build"),
    ],
)
def test_bad_configs_are_refused_in_words(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(PlanError, match=message):
        census(read_hub_config(path))


def test_a_link_or_a_fifo_is_not_read(tmp_path):
    target = _write(tmp_path, json.dumps({"model_type": "llama"}))
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "config.json").symlink_to(target)
    with pytest.raises(PlanError, match="cannot open"):
        read_hub_config(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(PlanError, match="not a regular file"):
        read_hub_config(tmp_path / "fifo.json")  # returns at once: nothing blocks on the FIFO


def test_the_command_prints_the_table_for_the_30b_config():
    out = io.StringIO()
    call_command("models", "plan", str(NANO_30B), "--gpus", "8", stdout=out)
    text = out.getvalue()
    assert "31.58 B total, 3.58 B active per token (6 of 128 routed experts)" in text
    rows = {line.split("  ")[0]: line.split()[-1] for line in text.splitlines() if "  " in line}
    assert rows["full SFT, ZeRO-2"] == "NO" and rows["full SFT, ZeRO-3"] == "yes"


def test_the_command_refuses_a_bad_file_with_its_reason(tmp_path):
    path = _write(tmp_path, '{"model_type": "llama", "hidden_size": -1}')
    with pytest.raises(CommandError, match="hidden_size is -1"):
        call_command("models", "plan", str(path), stdout=io.StringIO())
    with pytest.raises(CommandError, match="gpus must be between"):
        call_command("models", "plan", str(NANO_30B), "--gpus", "0", stdout=io.StringIO())
