"""vLLM's OpenAI-compatible server: its command line, whether this node can run it, and its
readiness check. Shared by the Slurm serving backend (slurm.py) and the agents' on-demand
evaluation job (evalsuite/model_server.py).

vLLM reads its key from `VLLM_API_KEY` (the same as `--api-key`, which would show in `ps`) and
serves under `--served-model-name`; its `/health` is open (no key), so readiness is asked
without the key. Weights are loaded from safetensors only (`--load-format safetensors`: no
pickle from an agent's checkpoint) and no remote code is trusted.

vLLM pins its own torch (CUDA) and transformers, so it usually lives in its own environment:
the executable is `ARENA_VLLM_EXECUTABLE` when set, else `vllm` on PATH or beside this
interpreter. This module imports no Django: it runs on cluster nodes too.

Hybrid Mamba models (Nemotron-H, the competition's base) get engine settings of their own, read
from the checkpoint's `config.json` (an agent's file: read bounded, checked, refused when it is
not a config this module can vouch for); a dense model's command does not change. Why each
flag, with vLLM's own source for it: arena/serving/README.md, "vLLM and hybrid models".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY_VARIABLE = "VLLM_API_KEY"
EXECUTABLE_VARIABLE = "ARENA_VLLM_EXECUTABLE"


@dataclass(frozen=True)
class VllmOptions:
    """The engine settings the platform chooses (never the agent)."""

    dtype: str = "auto"  # the checkpoint's own (bf16 for most), "bfloat16", "float16"
    max_model_len: int = 0  # 0: the model's own context length
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    # 0: vLLM's own default for a dense model; for a hybrid Mamba model, as many sequences as
    # fit MAMBA_STATE_BUDGET_BYTES of Mamba state (at most HYBRID_MAX_NUM_SEQS).
    max_num_seqs: int = 0


def vllm_executable(environ: Mapping[str, str] = os.environ) -> str | None:
    """The `vllm` command this node would run, or None when vLLM is not installed."""
    configured = environ.get(EXECUTABLE_VARIABLE, "")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = Path(sys.executable).parent / "vllm"
    return shutil.which("vllm") or (str(beside) if os.access(beside, os.X_OK) else None)


def cuda_visible(environ: Mapping[str, str] = os.environ, dev: Path = Path("/dev")) -> bool:
    """Whether this process sees an NVIDIA GPU: a device node exists and CUDA_VISIBLE_DEVICES
    (which Slurm sets from the job's GPUs) does not hide them all. Read without importing torch
    (the platform's torch may be a CPU build on a GPU node)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in {"", "-1", "none", "NoDevFiles"}:
        return False
    return any(dev.glob("nvidia[0-9]*"))


def vllm_serve_command(
    executable: str,
    checkpoint: Path | str,
    *,
    host: str,
    port: int,
    served_model_name: str,
    options: VllmOptions = VllmOptions(),
) -> list[str]:
    """`vllm serve` for one checkpoint; the key goes in the environment (`KEY_VARIABLE`). A
    hybrid Mamba checkpoint's settings (`architecture_flags`) come last; CheckpointConfigError
    when its config.json is one this module refuses."""
    command = [
        executable, "serve", str(checkpoint),
        "--host", host,
        "--port", str(port),
        "--served-model-name", served_model_name,
        "--dtype", options.dtype,
        "--gpu-memory-utilization", f"{options.gpu_memory_utilization:g}",
        "--tensor-parallel-size", str(options.tensor_parallel_size),
        "--load-format", "safetensors",
        "--generation-config", "auto",
    ]  # fmt: skip
    if options.max_model_len:
        command += ["--max-model-len", str(options.max_model_len)]
    architecture = checkpoint_architecture(checkpoint)
    command += architecture_flags(architecture, options)
    return command


def open_health(base_url: str) -> bool:
    """`GET /health` with no key (vLLM's is open): the key is never sent to check readiness."""
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


# --- hybrid Mamba models ---------------------------------------------------------------------

# A checkpoint's config.json is an agent's file. Real ones are a few KiB (the 30B-A3B's is ~2),
# and a model has tens of blocks, not thousands: anything bigger is refused, not parsed.
CONFIG_MAX_BYTES = 256 * 1024
MAX_BLOCKS = 1024
MAX_DIMENSION = 1 << 20
# The Mamba state the running sequences may hold together (vLLM keeps one per sequence, per
# Mamba block: see MambaLayout.state_bytes), and the most sequences a hybrid runs at once
# whatever its state (vLLM's own default on most GPUs).
MAMBA_STATE_BUDGET_BYTES = 4 * 1024**3
HYBRID_MAX_NUM_SEQS = 256
# The SSM state is accumulated over the whole sequence: vLLM's NemotronH config hook says "Only
# `float32` is known to have no accuracy issues", and left at "auto" vLLM takes the dtype from
# the checkpoint's own config.json, which the agent writes.
MAMBA_SSM_CACHE_DTYPE = "float32"

# Nemotron-H's block kinds, under every name its configs use: transformers 5 writes
# `layers_block_type` with "linear_attention" for a Mamba-2 block and "full_attention" for an
# attention block (older writers: "mamba", "attention"); hub configs and vLLM use the one-letter
# `hybrid_override_pattern`.
BLOCK_NAMES = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "attention",
    "full_attention": "attention",
    "moe": "moe",
    "mlp": "mlp",
}
PATTERN_LETTERS = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
LETTER_OF = {kind: letter for letter, kind in PATTERN_LETTERS.items()}


class CheckpointConfigError(ValueError):
    """A config.json the platform will not build a server command from."""


@dataclass(frozen=True)
class MambaLayout:
    """The Mamba-2 dimensions that size a hybrid model's per-sequence state."""

    blocks: int
    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int

    def state_bytes(self, *, conv_bytes: int, ssm_bytes: int = 4) -> int:
        """One sequence's Mamba state in vLLM, all blocks: per block a convolution state of
        (conv_kernel - 1) x (heads x head_dim + 2 x groups x state_size) values in the model's
        dtype and an SSM state of heads x head_dim x state_size in the SSM cache dtype
        (`MambaStateShapeCalculator.mamba2_state_shape`)."""
        conv = (self.conv_kernel - 1) * (
            self.heads * self.head_dim + 2 * self.groups * self.state_size
        )
        ssm = self.heads * self.head_dim * self.state_size
        return self.blocks * (conv * conv_bytes + ssm * ssm_bytes)


@dataclass(frozen=True)
class Architecture:
    """What the server command needs to know about a checkpoint, from its config.json."""

    model_type: str
    architectures: tuple[str, ...]
    dtype: str  # the checkpoint's own ("bfloat16", "float32", ...), "" when it names none
    # Nemotron-H: each block's kind ("mamba", "attention", "moe", "mlp"); () for other models.
    blocks: tuple[str, ...] = ()
    mamba: MambaLayout | None = None

    @property
    def hybrid(self) -> bool:
        return self.mamba is not None

    @property
    def pattern(self) -> str:
        """The blocks as vLLM's `hybrid_override_pattern` ("ME*E"), "" for a dense model."""
        return "".join(LETTER_OF[kind] for kind in self.blocks)


def checkpoint_architecture(checkpoint: Path | str) -> Architecture | None:
    """The checkpoint's architecture from its config.json; None when it has none (the server
    then fails to load it, in its own words). CheckpointConfigError for a config.json that is
    too big, not JSON, or a Nemotron-H config whose blocks or Mamba dimensions do not add up."""
    path = Path(checkpoint) / "config.json"
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise CheckpointConfigError(f"{path}: not a regular file")
        raw = file.read(CONFIG_MAX_BYTES + 1)
    if len(raw) > CONFIG_MAX_BYTES:
        raise CheckpointConfigError(f"{path}: over {CONFIG_MAX_BYTES // 1024} KiB")
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise CheckpointConfigError(f"{path}: not a JSON object")
    return architecture_from_config(config)


def architecture_from_config(config: Mapping[str, Any]) -> Architecture:
    """`Architecture` from a parsed config.json (see `checkpoint_architecture`)."""
    model_type = _text(config, "model_type")
    names = config.get("architectures") or []
    if not isinstance(names, list) or len(names) > 8 or not all(isinstance(n, str) for n in names):
        raise CheckpointConfigError("architectures: not a short list of names")
    dtype = _text(config, "dtype") or _text(config, "torch_dtype")
    architecture = Architecture(model_type, tuple(n[:100] for n in names), dtype)
    if model_type != "nemotron_h" and "NemotronHForCausalLM" not in names:
        return architecture  # dense (or a hybrid family this module does not know): unchanged
    blocks = _nemotron_blocks(config)
    mamba = MambaLayout(
        blocks=blocks.count("mamba"),
        heads=_dimension(config, "mamba_num_heads"),
        head_dim=_dimension(config, "mamba_head_dim"),
        state_size=_dimension(config, "ssm_state_size"),
        groups=_dimension(config, "n_groups", "mamba_n_groups"),
        conv_kernel=_dimension(config, "conv_kernel", "mamba_d_conv", default=4),
    )
    if mamba.heads % mamba.groups:
        raise CheckpointConfigError(
            f"mamba_num_heads {mamba.heads} is not a multiple of n_groups {mamba.groups}"
        )
    return Architecture(
        model_type, architecture.architectures, dtype, blocks, mamba if mamba.blocks else None
    )


def architecture_flags(architecture: Architecture | None, options: VllmOptions) -> list[str]:
    """The `vllm serve` options a checkpoint's architecture calls for; [] for a dense model
    (unless `options.max_num_seqs` is set). README, "vLLM and hybrid models", says why each."""
    flags: list[str] = []
    if architecture is not None and architecture.mamba is not None:
        flags += ["--mamba-ssm-cache-dtype", MAMBA_SSM_CACHE_DTYPE]
        # Prefix caching on a Mamba model is experimental in vLLM ("align"/"all" cache modes)
        # and only resumes at whole Mamba blocks (hundreds of tokens): a battle's prompt is
        # shorter than one. Off, vLLM keeps one state per sequence, as sized here.
        flags += ["--no-enable-prefix-caching"]
        max_num_seqs = options.max_num_seqs or hybrid_max_num_seqs(architecture, options)
        flags += ["--max-num-seqs", str(max_num_seqs)]
    elif options.max_num_seqs:
        flags += ["--max-num-seqs", str(options.max_num_seqs)]
    return flags


def hybrid_max_num_seqs(architecture: Architecture, options: VllmOptions) -> int:
    """As many sequences as fit MAMBA_STATE_BUDGET_BYTES of Mamba state, 1 to 256."""
    assert architecture.mamba is not None
    dtype = architecture.dtype if options.dtype == "auto" else options.dtype
    conv_bytes = 4 if dtype in {"float32", "float"} else 2
    per_sequence = architecture.mamba.state_bytes(conv_bytes=conv_bytes)
    return max(1, min(HYBRID_MAX_NUM_SEQS, MAMBA_STATE_BUDGET_BYTES // per_sequence))


# `vllm serve` in a shell command: the word `vllm` (a path may lead to it), then `serve`.
_VLLM_SERVE = re.compile(r"(?:^|(?<=[\s;&|(]))((?:[^\s;&|()]*/)?vllm\s+serve)(?=\s|$)")


def with_model_flags(command: str, flags: Sequence[str]) -> str:
    """A shell command (the Slurm backend's setting) with `flags` right after its `vllm serve`,
    before the options already there, which therefore win where both set one. Unchanged when
    there are no flags or the command runs no `vllm serve` (e.g. the guarded transformers
    server of the test cluster)."""
    if not flags:
        return command
    quoted = shlex.join(flags)
    return _VLLM_SERVE.sub(lambda found: f"{found.group(1)} {quoted}", command, count=1)


def _nemotron_blocks(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The kinds of a Nemotron-H config's blocks, from every key that names them; refused when
    two keys disagree (transformers reads one, vLLM another: they would build different
    models)."""
    found: dict[str, tuple[str, ...]] = {}
    for key in ("layers_block_type", "layer_types"):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not 0 < len(value) <= MAX_BLOCKS:
            raise CheckpointConfigError(f"{key}: not a list of 1 to {MAX_BLOCKS} block kinds")
        kinds = [BLOCK_NAMES.get(name) if isinstance(name, str) else None for name in value]
        if None in kinds:
            raise CheckpointConfigError(
                f"{key}: unknown block kinds (known: {sorted(BLOCK_NAMES)})"
            )
        found[key] = tuple(kind for kind in kinds if kind)
    pattern = config.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_BLOCKS:
            raise CheckpointConfigError(
                f"hybrid_override_pattern: not a string of 1 to {MAX_BLOCKS} letters"
            )
        if set(pattern) - set(PATTERN_LETTERS):
            raise CheckpointConfigError(
                f"hybrid_override_pattern: letters other than {''.join(PATTERN_LETTERS)}"
            )
        found["hybrid_override_pattern"] = tuple(PATTERN_LETTERS[letter] for letter in pattern)
    if not found:
        raise CheckpointConfigError(
            "a Nemotron-H config names its blocks (layers_block_type or hybrid_override_pattern)"
        )
    if len(set(found.values())) > 1:
        raise CheckpointConfigError(f"{' and '.join(found)} describe different blocks")
    return next(iter(found.values()))


def _text(config: Mapping[str, Any], key: str) -> str:
    value = config.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 100:
        raise CheckpointConfigError(f"{key}: not a short string")
    return value


def _dimension(config: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DIMENSION:
            raise CheckpointConfigError(f"{key}: not a whole number from 1 to {MAX_DIMENSION}")
        return value
    if default is None:
        raise CheckpointConfigError(f"{keys[0]}: missing from a Nemotron-H config")
    return default
