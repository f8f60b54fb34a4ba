"""The census: the model built on the meta device, its parameters counted by kind."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from cluster.memory_plan.config import PlanError

KINDS = (
    "embeddings/head",
    "attention",
    "Mamba",
    "routed experts",
    "shared experts",
    "router",
    "dense MLP",
    "norms",
    "other",
)


@dataclass(frozen=True)
class Census:
    """What the model is made of, counted on the meta device."""

    model_type: str
    architecture: str
    total: int
    by_kind: dict[str, int]
    tensors: int  # parameter tensors: torch's AdamW keeps a step counter for each
    routed_experts: int  # parameters of all routed experts together
    experts: int  # routed experts per MoE layer (0 for a dense model)
    experts_per_token: int
    input_embedding: int  # the input table when it is not tied to the head (a lookup, no matmul)
    largest_block: int  # the biggest decoder block: one FSDP2 unit, gathered whole
    root: int  # parameters outside the blocks (embeddings, final norm, head): FSDP2's root unit
    largest_module: int  # the biggest module's own parameters: what ZeRO-3 fetches at once
    lora_width: int  # sum of in + out over the Linear layers LoRA targets (see `census`)
    lora_layers: int
    lora_targets: tuple[str, ...]  # their names, as PEFT's `target_modules` takes them
    block_token_width: int  # activation elements per token of the heaviest block (see below)
    hidden_size: int
    vocab_size: int
    layers: int
    attention_layers: int
    kv_width: int  # K + V elements per token of one attention layer, all KV heads
    kv_head_dim: int
    mamba_layers: int
    mamba_conv_state: int  # elements per sequence of one Mamba layer's convolution window
    mamba_ssm_state: int  # elements per sequence of one Mamba layer's SSM state
    mamba_ssm_state_bytes: int  # its dtype (`mamba_ssm_cache_dtype`, fp32 for Nemotron-H)

    @property
    def active(self) -> int:
        """Parameters a token passes through: all but the routed experts it is not sent to."""
        if not self.experts:
            return self.total
        per_expert = self.routed_experts // self.experts  # each fused tensor is [experts, ...]
        return self.total - per_expert * (self.experts - self.experts_per_token)


def census(config: dict[str, Any]) -> Census:
    """Build `config` on the meta device with the installed transformers and count it."""
    import torch
    import transformers
    from torch import nn
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise PlanError("the config names no model_type")
    if model_type not in CONFIG_MAPPING:
        raise PlanError(
            f"unknown model_type {model_type[:64]!r}: transformers {transformers.__version__} "
            "does not know it (no remote code is run)"
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PlanError(f"transformers has no causal language model for {model_type!r}")
    # auto_map points at the hub's own modelling code: never followed.
    fields = {k: v for k, v in config.items() if k != "auto_map"}
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        config_class = CONFIG_MAPPING[model_type]
        # As from_pretrained reads it: transformers writes inf as {"__float__": "Infinity"}.
        hf_config = config_class.from_dict(config_class._decode_special_floats(fields))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=False)  # type: ignore[no-untyped-call]
    except Exception as error:  # an untrusted config may break any step of the build
        raise PlanError(
            f"transformers cannot build this {model_type} config: {error}"[:300]
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)

    experts = _first_int(hf_config, "n_routed_experts", "num_local_experts", "num_experts")
    per_token = _first_int(hf_config, "num_experts_per_tok", "moe_topk", "top_k")
    modules = dict(model.named_modules())
    by_kind: dict[str, int] = dict.fromkeys(KINDS, 0)
    blocks: dict[str, int] = defaultdict(int)
    root = largest_module = tensors = 0
    for module in modules.values():
        own = sum(p.numel() for p in module.parameters(recurse=False))
        largest_module = max(largest_module, own)
    for name, parameter in model.named_parameters():  # tied weights once
        size = parameter.numel()
        tensors += 1
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        by_kind[_kind(owner, modules)] += size
        block = _block_of(name)
        if block is None:
            root += size
        else:
            blocks[block] += size
    total = sum(by_kind.values())
    if by_kind["routed experts"] and (not experts or not per_token or per_token > experts):
        raise PlanError("the model has routed experts but the config says not how many per token")

    table = model.get_input_embeddings()
    if not isinstance(table, nn.Embedding):
        raise PlanError(f"{type(model).__name__} has no input embedding table to count")
    embedding = table.weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embedding
    attention = [m for m in modules.values() if "attention" in type(m).__name__.lower()]
    attention = [m for m in attention if hasattr(m, "k_proj") and hasattr(m, "v_proj")]
    mamba = [m for m in modules.values() if hasattr(m, "ssm_state_size") and hasattr(m, "conv1d")]
    # LoRA's targets: every Linear but the head (PEFT's "all-linear"), less a Mamba mixer's
    # out_proj, which PEFT refuses to adapt (_check_lora_target_modules_mamba). The fused 3-D
    # expert tensors are parameters, not Linear modules: they are not adapted.
    mamba_out = {
        id(m.out_proj) for m in mamba if isinstance(getattr(m, "out_proj", None), nn.Linear)
    }
    lora = {
        n: m
        for n, m in modules.items()
        if isinstance(m, nn.Linear)
        and m is not head
        and n.rsplit(".", 1)[-1] != "lm_head"
        and id(m) not in mamba_out
    }
    kv_head_dim = int(getattr(hf_config, "head_dim", 0) or 0) or (
        hf_config.hidden_size // hf_config.num_attention_heads if attention else 0
    )
    first_mamba = mamba[0] if mamba else None
    ssm_dtype = str(getattr(hf_config, "mamba_ssm_cache_dtype", "float32"))
    return Census(
        model_type=model_type,
        architecture=type(model).__name__,
        total=total,
        by_kind=by_kind,
        tensors=tensors,
        routed_experts=by_kind["routed experts"],
        experts=experts if by_kind["routed experts"] else 0,
        experts_per_token=per_token if by_kind["routed experts"] else 0,
        input_embedding=0 if tied else embedding.numel(),
        largest_block=max(blocks.values(), default=0),
        root=root,
        largest_module=largest_module,
        lora_width=sum(m.in_features + m.out_features for m in lora.values()),
        lora_layers=len(lora),
        lora_targets=tuple(sorted({n.rsplit(".", 1)[-1] for n in lora})),
        block_token_width=_heaviest_block_width(modules, per_token or 0),
        hidden_size=int(embedding.shape[1]),
        vocab_size=int(embedding.shape[0]),
        layers=len(blocks),
        attention_layers=len(attention),
        kv_width=max((m.k_proj.out_features + m.v_proj.out_features for m in attention), default=0),
        kv_head_dim=kv_head_dim,
        mamba_layers=len(mamba),
        # A causal convolution of kernel K needs the last K - 1 inputs of every channel.
        mamba_conv_state=(
            first_mamba.conv1d.out_channels * (first_mamba.conv1d.kernel_size[0] - 1)
            if first_mamba is not None
            else 0
        ),
        # Mamba-2's state: a (head_dim x state) matrix per head.
        mamba_ssm_state=(
            first_mamba.num_heads * first_mamba.head_dim * first_mamba.ssm_state_size
            if first_mamba is not None
            else 0
        ),
        mamba_ssm_state_bytes=2 if ssm_dtype in ("bfloat16", "float16") else 4,
    )


def _first_int(config: Any, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _block_of(name: str) -> str | None:
    """The decoder block a parameter belongs to: its path up to the first numbered step."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return None


def _kind(owner: str, modules: dict[str, Any]) -> str:
    """The kind of the parameters `owner` holds, from its path and the classes of the modules
    between its decoder block and itself (the names transformers 5 uses across families:
    `*Experts` fused tensors, `*TopKRouter`, `shared_expert(s)`, `*Attention`, `*Mamba*Mixer`,
    `*RMSNorm`, `*MLP`). Outside a block only embeddings, the head and norms are expected."""
    parts = owner.split(".") if owner else []
    block = next((i for i, part in enumerate(parts) if part.isdigit()), len(parts))
    leaf = type(modules[owner]).__name__.lower()
    chain = [
        type(modules[".".join(parts[:i])]).__name__.lower()
        for i in range(block + 1, len(parts) + 1)
    ]
    if leaf == "embedding" or (parts and parts[-1] == "lm_head"):
        return "embeddings/head"
    if any(part.startswith("shared_expert") for part in parts):
        return "shared experts"
    if any(c.endswith("experts") for c in chain) or "experts" in parts[block:]:
        return "routed experts"
    if "router" in leaf or (parts and parts[-1] == "gate" and leaf == "linear"):
        return "router"
    if any("mamba" in c for c in chain):
        return "Mamba"
    if any("attention" in c for c in chain):
        return "attention"
    if "norm" in leaf:
        return "norms"
    if any(c.endswith("mlp") for c in chain):
        return "dense MLP"
    return "other"


def _heaviest_block_width(modules: dict[str, Any], per_token: int) -> int:
    """Activation elements per token of the heaviest decoder block, as autograd keeps them for
    its backward: each matmul's input and output (a Linear's in + out features, a convolution's
    channels twice), and for fused experts the same for each of the `per_token` experts a token
    visits. Attention adds no sequence-squared term: SDPA/flash attention keep none."""
    from torch import nn

    widths: dict[str, int] = defaultdict(int)
    for name, module in modules.items():
        block = _block_of(name + ".x")
        if block is None:
            continue
        if isinstance(module, nn.Linear):
            widths[block] += module.in_features + module.out_features
        elif isinstance(module, nn.Conv1d):
            widths[block] += 2 * module.out_channels
        elif type(module).__name__.lower().endswith("experts"):
            for tensor in module.parameters(recurse=False):
                if tensor.dim() == 3:  # [experts, out, in]
                    widths[block] += per_token * (tensor.shape[1] + tensor.shape[2])
    return max(widths.values(), default=0)
