"""What a checkpoint's `config.json` describes, read as the agent's text: its dimensions, its
layer count, and the parameters it implies in all and per token (a mixture of experts routes
each token through a few of its experts), computed from the numbers alone. Nothing is built.

Every number is checked to be a whole number within a bound before it is multiplied, every list
and string before it is read, so a config of a billion experts or a layer pattern of a million
characters is refused (`ConfigInvalid`) in microseconds.

The arithmetic is exact, parameter for parameter as `model.parameters()` counts them, for the
architectures the competition uses:
- `nemotron_h` (NVIDIA's hybrid of Mamba-2, attention, MLP and mixture-of-experts blocks; its
  blocks from `layers_block_type` / `layer_types`, or from `hybrid_override_pattern`);
- `llama` (the dense decoder of the first tiny kit).
Any other config gets an estimate (`exact=False`): embeddings, attention and a gated MLP per
layer, or per routed expert for a Mixtral- or Qwen-MoE-style config (`num_local_experts` /
`num_experts` / `n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`, a shared
expert), enough to bound what a config may claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# config.json's dimensions under their names across architectures; each, where present, must
# be a whole number from 1 to its bound.
DIMENSIONS = {
    "layers": (("num_hidden_layers", "n_layer", "num_layers"), 1024),  # the largest have ~128
    "hidden": (("hidden_size", "n_embd", "d_model"), 1 << 20),
    "intermediate": (("intermediate_size", "n_inner", "ffn_dim"), 1 << 22),
    "vocab": (("vocab_size",), 1 << 23),
    "heads": (("num_attention_heads", "n_head"), 1 << 14),
    "kv_heads": (("num_key_value_heads",), 1 << 14),
    "head_dim": (("head_dim",), 1 << 16),
    "positions": (("max_position_embeddings", "n_positions"), 1 << 24),
    "experts": (("num_local_experts", "num_experts", "n_routed_experts"), 1 << 12),
    "experts_per_token": (("num_experts_per_tok", "moe_topk"), 1 << 12),
    "expert_intermediate": (("moe_intermediate_size",), 1 << 22),
}
OPTIONAL = {"head_dim", "kv_heads", "intermediate", "experts", "experts_per_token",
            "expert_intermediate"}  # fmt: skip
MAX_LAYERS = DIMENSIONS["layers"][1]
MAX_SHARED_EXPERTS = 1 << 8
# Nemotron-H's block kinds, and the letters of its older `hybrid_override_pattern`.
NEMOTRON_H_BLOCKS = {"linear_attention", "full_attention", "moe", "mlp"}
NEMOTRON_H_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
NEMOTRON_H_PATTERN = {"M": "linear_attention", "*": "full_attention", "E": "moe", "-": "mlp"}


class ConfigInvalid(ValueError):
    """What is wrong with config.json, fit to show the agent."""


@dataclass(frozen=True)
class ParameterCount:
    total: int
    active: int  # per token: the routed experts a token does not go through left out
    exact: bool  # the architecture's own arithmetic, or an estimate
    layers: int
    moe_layers: int = 0
    experts: int = 0  # routed experts of each MoE layer
    experts_per_token: int = 0

    def __add__(self, other: ParameterCount) -> ParameterCount:  # a config's nested parts
        return ParameterCount(
            self.total + other.total,
            self.active + other.active,
            self.exact and other.exact,
            max(self.layers, other.layers),
            self.moe_layers + other.moe_layers,
            max(self.experts, other.experts),
            max(self.experts_per_token, other.experts_per_token),
        )

    def describe(self) -> str:
        if self.active == self.total:
            return f"{self.total:,} parameters"
        return f"{self.total:,} parameters ({self.active:,} active per token)"


def config_dimensions(config: dict) -> dict[str, int]:
    """The config's dimensions that are present, each checked to be a whole number in bounds."""
    found: dict[str, int] = {}
    for dimension, (names, bound) in DIMENSIONS.items():
        for name in names:
            if name not in config:
                continue
            value = config[name]
            if value is None and dimension in OPTIONAL:
                continue  # the architecture's default
            found.setdefault(dimension, _whole(config, name, bound, least=1))
    heads, hidden = found.get("heads"), found.get("hidden")
    if heads and hidden and "head_dim" not in found and hidden % heads:
        raise ConfigInvalid(
            f"config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )
    if heads and found.get("kv_heads") and heads % found["kv_heads"]:
        raise ConfigInvalid(
            f"config.json: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {found['kv_heads']}"
        )
    experts, per_token = found.get("experts"), found.get("experts_per_token")
    if experts and per_token and per_token > experts:
        raise ConfigInvalid(
            f"config.json: num_experts_per_tok {per_token} is more than the {experts} experts"
        )
    return found


def config_parameters(config: dict) -> ParameterCount | None:
    """Total and active parameters of the model `config` describes, summed over its parts (a
    text_config beside a vision_config); None where it lacks the sizes to say."""
    if config.get("model_type") == "nemotron_h":
        return nemotron_h_parameters(config)
    if config.get("model_type") == "llama":
        return llama_parameters(config)
    counts = [
        count
        for section in [config, *(part for part in config.values() if isinstance(part, dict))]
        if (count := estimated_parameters(section)) is not None
    ]
    if not counts:
        return None
    total = counts[0]
    for count in counts[1:]:
        total = total + count
    return total


def nemotron_h_layer_types(config: dict) -> list[str]:
    """The block kinds, as transformers reads them: `layers_block_type` (or its alias
    `layer_types`), else `hybrid_override_pattern`, else the class default."""
    listed = config.get("layers_block_type", config.get("layer_types"))
    if listed is not None:
        if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_LAYERS:
            raise ConfigInvalid(
                f"config.json: layers_block_type must be a list of 1 to {MAX_LAYERS} block kinds"
            )
        kinds = [NEMOTRON_H_LEGACY.get(k, k) if isinstance(k, str) else k for k in listed]
        if not all(isinstance(k, str) and k in NEMOTRON_H_BLOCKS for k in kinds):
            raise ConfigInvalid(
                "config.json: each of layers_block_type must be one of "
                + ", ".join(sorted(NEMOTRON_H_BLOCKS))
            )
        return kinds
    pattern = config.get("hybrid_override_pattern")
    if pattern is not None:
        if (
            not isinstance(pattern, str)
            or not 1 <= len(pattern) <= MAX_LAYERS
            or not set(pattern) <= NEMOTRON_H_PATTERN.keys()
        ):
            raise ConfigInvalid(
                f"config.json: hybrid_override_pattern must be 1 to {MAX_LAYERS} of the letters "
                + " ".join(NEMOTRON_H_PATTERN)
            )
        return [NEMOTRON_H_PATTERN[letter] for letter in pattern]
    return ["linear_attention", "moe", "full_attention", "mlp"]


def nemotron_h_parameters(config: dict) -> ParameterCount:
    """transformers' NemotronHForCausalLM (5.x), block by block; defaults are its config's."""
    blocks = nemotron_h_layer_types(config)
    whole = _reader(config)
    hidden, vocab = whole("hidden_size", 4096), whole("vocab_size", 131072)
    heads = whole("num_attention_heads", 32)
    kv_heads = whole("num_key_value_heads", 8, null=heads)
    head_dim = whole("head_dim", 128, null=hidden // heads)
    if heads % kv_heads:
        raise ConfigInvalid(
            f"config.json: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    mlp_bias, use_bias = _flag(config, "mlp_bias", False), _flag(config, "use_bias", False)

    mamba_heads = whole("mamba_num_heads", 128)
    mamba_inner = mamba_heads * whole("mamba_head_dim", 64)
    groups = whole("mamba_n_groups", whole("n_groups", 8))
    if mamba_inner % groups:
        raise ConfigInvalid(
            f"config.json: mamba_num_heads x mamba_head_dim ({mamba_inner}) is not a multiple "
            f"of n_groups {groups}"
        )
    conv = mamba_inner + 2 * groups * whole("ssm_state_size", 128)
    kernel = whole("mamba_d_conv", whole("conv_kernel", 4, bound=1 << 10), bound=1 << 10)
    conv_bias = _flag(config, "mamba_conv_bias", _flag(config, "use_conv_bias", True))
    projection = mamba_inner + conv + mamba_heads
    mamba = (
        hidden * projection + (projection if use_bias else 0)  # in_proj
        + conv * kernel + (conv if conv_bias else 0)  # conv1d (depthwise)
        + 3 * mamba_heads  # dt_bias, A_log, D
        + mamba_inner  # the gated norm
        + mamba_inner * hidden + (hidden if use_bias else 0)  # out_proj
    )  # fmt: skip
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim

    def mlp(width: int) -> int:  # up and down, no gate (relu2)
        return 2 * hidden * width + ((width + hidden) if mlp_bias else 0)

    dense = mlp(whole("intermediate_size", 21504))
    experts = whole("n_routed_experts", whole("num_local_experts", 8), bound=1 << 12)
    per_token = whole("num_experts_per_tok", 2, bound=1 << 12)
    if per_token > experts:
        raise ConfigInvalid(
            f"config.json: num_experts_per_tok {per_token} is more than the {experts} "
            "n_routed_experts"
        )
    latent = whole("moe_latent_size", None)
    width = latent or hidden
    expert = 2 * width * whole("moe_intermediate_size", 7688)  # up (E, I, w), down (E, w, I)
    moe_fixed = (
        experts * hidden  # the router (its score-correction bias is a buffer, not a parameter)
        + mlp(whole("moe_shared_expert_intermediate_size", 7688))
        + ((2 * hidden * latent + ((latent + hidden) if mlp_bias else 0)) if latent else 0)
    )
    per_block = {
        "linear_attention": mamba,
        "full_attention": attention,
        "mlp": dense,
        "moe": moe_fixed + experts * expert,
    }
    # transformers 5's Nemotron-H never ties its head to its embeddings (`_tied_weights_keys`
    # is empty): a tie_word_embeddings of true still builds, and loads, an lm_head of its own.
    _flag(config, "tie_word_embeddings", False)
    embeddings = 2 * vocab * hidden
    total = embeddings + hidden + sum(hidden + per_block[kind] for kind in blocks)
    moe_layers = blocks.count("moe")
    return ParameterCount(
        total=total,
        active=total - moe_layers * (experts - per_token) * expert,
        exact=True,
        layers=len(blocks),
        moe_layers=moe_layers,
        experts=experts if moe_layers else 0,
        experts_per_token=per_token if moe_layers else 0,
    )


def llama_parameters(config: dict) -> ParameterCount:
    """transformers' LlamaForCausalLM; defaults are its config's."""
    whole = _reader(config)
    hidden, vocab = whole("hidden_size", 4096), whole("vocab_size", 32000)
    layers = whole("num_hidden_layers", 32, bound=MAX_LAYERS)
    heads = whole("num_attention_heads", 32)
    kv_heads = whole("num_key_value_heads", heads)
    head_dim = whole("head_dim", hidden // heads)
    if heads % kv_heads:
        raise ConfigInvalid(
            f"config.json: num_attention_heads {heads} is not a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    intermediate = whole("intermediate_size", 11008)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = 2 * hidden * q + 2 * hidden * kv
    if _flag(config, "attention_bias", False):
        attention += q + 2 * kv + hidden
    mlp = 3 * hidden * intermediate + (
        2 * intermediate + hidden if _flag(config, "mlp_bias", False) else 0
    )
    embeddings = vocab * hidden * (1 if _flag(config, "tie_word_embeddings", False) else 2)
    total = embeddings + hidden + layers * (attention + mlp + 2 * hidden)
    return ParameterCount(total=total, active=total, exact=True, layers=layers)


def estimated_parameters(config: dict) -> ParameterCount | None:
    """A rough count of a decoder's parameters (embeddings, attention, a gated MLP per layer or
    per routed expert, a shared expert); None where the config lacks the sizes to say."""
    dimensions = config_dimensions(config)
    hidden, layers, vocab = (dimensions.get(k) for k in ("hidden", "layers", "vocab"))
    if not (hidden and layers and vocab):
        return None
    heads = dimensions.get("heads", 1)
    head_dim = dimensions.get("head_dim", hidden // heads)
    kv_heads = dimensions.get("kv_heads", heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    intermediate = dimensions.get("intermediate", 4 * hidden)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    experts = dimensions.get("experts")
    if not experts:
        total = embeddings + layers * (attention + 3 * hidden * intermediate)
        return ParameterCount(total=total, active=total, exact=False, layers=layers)
    per_token = dimensions.get("experts_per_token", min(2, experts))
    expert = 3 * hidden * dimensions.get("expert_intermediate", intermediate)
    whole = _reader(config)
    shared = (
        3
        * hidden
        * (
            whole("shared_expert_intermediate_size", 0, least=0)
            + whole("n_shared_experts", 0, least=0, bound=MAX_SHARED_EXPERTS)
            * dimensions.get("expert_intermediate", intermediate)
        )
    )
    fixed = attention + experts * hidden + shared
    total = embeddings + layers * (fixed + experts * expert)
    return ParameterCount(
        total=total,
        active=embeddings + layers * (fixed + per_token * expert),
        exact=False,
        layers=layers,
        moe_layers=layers,
        experts=experts,
        experts_per_token=per_token,
    )


def _reader(config: dict) -> Callable[..., Any]:
    """`whole(name, default)`: the config's `name`, a whole number from `least` (1) to a bound
    (that of its dimension, else 2^22); `default` where absent, `null` (the default unless
    given) where null."""
    bounds = {name: bound for names, bound in DIMENSIONS.values() for name in names}
    unset = object()

    def whole(
        name: str, default: Any, *, null: Any = unset, bound: int | None = None, least: int = 1
    ) -> Any:
        if name not in config:
            return default
        if config[name] is None:
            return default if null is unset else null
        return _whole(config, name, bound or bounds.get(name, 1 << 22), least=least)

    return whole


def _whole(config: dict, name: str, bound: int, *, least: int) -> int:
    value = config[name]
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= bound:
        raise ConfigInvalid(
            f"config.json: {name} must be a whole number from {least} to {bound}, not "
            f"{_shown(value)}"
        )
    return value


def _flag(config: dict, name: str, default: bool) -> bool:
    value = config.get(name, default)
    if not isinstance(value, bool):
        raise ConfigInvalid(f"config.json: {name} must be true or false, not {_shown(value)}")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
