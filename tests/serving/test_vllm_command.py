"""vLLM's command line for each architecture: a dense model's is unchanged, a hybrid Mamba one
(Nemotron-H) gets the engine settings arena/serving/README.md derives from vLLM's source, and
a config.json the platform cannot vouch for is refused before any server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from arena.serving.local import ServerStartError
from arena.serving.slurm import SlurmServingBackend
from arena.serving.vllm import (
    CONFIG_MAX_BYTES,
    CheckpointConfigError,
    VllmOptions,
    architecture_flags,
    checkpoint_architecture,
    vllm_serve_command,
)

# The engine settings every command here starts with (arena/serving/vllm.py).
BASE = [
    "vllm", "serve", "{model}",
    "--host", "127.0.0.1",
    "--port", "8000",
    "--served-model-name", "contestant-0123",
    "--dtype", "auto",
    "--gpu-memory-utilization", "0.9",
    "--tensor-parallel-size", "1",
    "--load-format", "safetensors",
    "--generation-config", "auto",
]  # fmt: skip
HYBRID_FLAGS = ["--mamba-ssm-cache-dtype", "float32", "--no-enable-prefix-caching"]

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "torch_dtype": "float32",
}
# The tiny kit's Nemotron-H as transformers 5.24 saves it: its blocks in `layers_block_type`
# ("linear_attention" is a Mamba-2 block), no `hybrid_override_pattern`.
TINY_NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "layers_block_type": ["linear_attention", "moe", "full_attention", "moe"],
    "hidden_size": 128,
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "ssm_state_size": 16,
    "n_groups": 1,
    "conv_kernel": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "dtype": "float32",
}
# The Mamba-relevant part of NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's config.json: 52 blocks
# (23 Mamba-2, 23 MoE, 6 attention), remote code offered in `auto_map`, and the checkpoint's own
# choice of SSM cache dtype, which vLLM would follow if the command left it at "auto".
NANO_30B = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "auto_map": {
        "AutoConfig": "configuration_nemotron_h.NemotronHConfig",
        "AutoModelForCausalLM": "modeling_nemotron_h.NemotronHForCausalLM",
    },
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_hidden_layers": 52,
    "hidden_size": 2688,
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "mamba_ssm_cache_dtype": "float32",
    "torch_dtype": "bfloat16",
}


def checkpoint(folder: Path, config: dict | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (folder / "config.json").write_text(text)
    return folder


def command(model: Path, options: VllmOptions | None = None) -> list[str]:
    return vllm_serve_command(
        "vllm", model, host="127.0.0.1", port=8000, served_model_name="contestant-0123",
        options=options or VllmOptions(),
    )  # fmt: skip


def base(model: Path) -> list[str]:
    return [part.format(model=model) for part in BASE]


def test_a_dense_models_command_is_the_one_it_always_was(tmp_path):
    llama = checkpoint(tmp_path / "llama", LLAMA)
    assert command(llama) == base(llama)
    assert command(tmp_path / "no-config") == base(tmp_path / "no-config")


def test_the_tiny_nemotron_h_gets_the_hybrid_settings_and_no_remote_code(tmp_path):
    tiny = checkpoint(tmp_path / "tiny", TINY_NEMOTRON_H)
    architecture = checkpoint_architecture(tiny)
    assert architecture is not None and architecture.pattern == "ME*E"
    # One Mamba block: 3 x (8 x 32 + 2 x 16) float32 conv values + 8 x 32 x 16 float32 SSM.
    assert architecture.mamba is not None
    assert architecture.mamba.state_bytes(conv_bytes=4) == 3 * 288 * 4 + 4096 * 4
    assert command(tiny) == [*base(tiny), *HYBRID_FLAGS, "--max-num-seqs", "256"]
    assert not any("trust-remote-code" in part for part in command(tiny))


def test_the_30b_base_runs_as_many_sequences_as_4_gib_of_mamba_state_hold(tmp_path):
    nano = checkpoint(tmp_path / "nano", NANO_30B)
    architecture = checkpoint_architecture(nano)
    assert architecture is not None and architecture.mamba is not None
    assert architecture.mamba.blocks == 23
    # Per sequence: 23 x (3 x (4096 + 2 x 8 x 128) bf16 + 64 x 64 x 128 fp32) = 46.8 MiB.
    per_sequence = architecture.mamba.state_bytes(conv_bytes=2)
    assert per_sequence == 23 * (3 * 6144 * 2 + 64 * 64 * 128 * 4)
    assert 4 * 1024**3 // per_sequence == 87
    assert command(nano)[len(BASE) :] == [*HYBRID_FLAGS, "--max-num-seqs", "87"]
    # Native in vLLM (its registry has NemotronHForCausalLM): auto_map's code is never run.
    assert not any("trust-remote-code" in part for part in command(nano))
    # A set limit is the operator's; fp32 weights double the convolution state.
    assert command(nano, VllmOptions(max_num_seqs=8))[-1] == "8"
    assert command(nano, VllmOptions(dtype="float32"))[-1] == "86"


def test_the_ssm_cache_dtype_is_the_platforms_whatever_the_checkpoint_says(tmp_path):
    cheap = checkpoint(tmp_path / "cheap", {**NANO_30B, "mamba_ssm_cache_dtype": "float16"})
    flags = command(cheap)
    assert flags[flags.index("--mamba-ssm-cache-dtype") + 1] == "float32"


def test_a_dense_models_sequence_limit_is_set_only_when_asked(tmp_path):
    llama = checkpoint(tmp_path / "llama", LLAMA)
    assert command(llama, VllmOptions(max_num_seqs=32)) == [*base(llama), "--max-num-seqs", "32"]
    assert architecture_flags(None, VllmOptions()) == []


@pytest.mark.parametrize(
    ("config", "refusal"),
    [
        ({**NANO_30B, "padding": "x" * CONFIG_MAX_BYTES}, "over 256 KiB"),
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ({**TINY_NEMOTRON_H, "hybrid_override_pattern": "MMEE"}, "describe different blocks"),
        ({**TINY_NEMOTRON_H, "layers_block_type": ["mamba", "conv"]}, "unknown block kinds"),
        ({**TINY_NEMOTRON_H, "layers_block_type": ["moe"] * 5000}, "not a list of 1 to 1024"),
        ({**NANO_30B, "hybrid_override_pattern": "MEX"}, "letters other than"),
        ({**NANO_30B, "mamba_num_heads": 0}, "mamba_num_heads: not a whole number"),
        ({**NANO_30B, "ssm_state_size": True}, "ssm_state_size: not a whole number"),
        ({**NANO_30B, "n_groups": 7}, "not a multiple of n_groups"),
        ({k: v for k, v in NANO_30B.items() if k != "mamba_head_dim"}, "mamba_head_dim: missing"),
        ({k: v for k, v in NANO_30B.items() if k != "hybrid_override_pattern"}, "names its blocks"),
        ({**LLAMA, "architectures": ["X"] * 100}, "architectures: not a short list"),
    ],
)
def test_a_config_that_does_not_add_up_is_refused(tmp_path, config, refusal):
    bad = checkpoint(tmp_path / "bad", config)
    with pytest.raises(CheckpointConfigError, match=refusal):
        command(bad)


def test_a_config_json_that_is_a_link_or_no_file_is_refused(tmp_path):
    elsewhere = checkpoint(tmp_path / "elsewhere", TINY_NEMOTRON_H)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").symlink_to(elsewhere / "config.json")
    with pytest.raises(CheckpointConfigError, match="cannot be read"):
        checkpoint_architecture(linked)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    with pytest.raises(CheckpointConfigError, match="not a regular file"):
        checkpoint_architecture(fifo)  # and does not wait for a writer


DEFAULT_COMMAND = 'vllm serve "$CHECKPOINT" --host 0.0.0.0 --port "$PORT" --served-model-name "$SERVED_MODEL_NAME"'


def slurm_command(tmp_path: Path, model: Path, setting: str = DEFAULT_COMMAND) -> str:
    return SlurmServingBackend(command=setting, folder=tmp_path / "serving").server_command(model)


def test_the_slurm_job_command_gets_the_flags_after_vllm_serve_and_a_dense_one_nothing(tmp_path):
    assert settings.ARENA_SERVING_SLURM_COMMAND == DEFAULT_COMMAND  # the setting tested here
    llama = checkpoint(tmp_path / "llama", LLAMA)
    nano = checkpoint(tmp_path / "nano", NANO_30B)
    assert slurm_command(tmp_path, llama) == DEFAULT_COMMAND
    assert slurm_command(tmp_path, nano) == (
        "vllm serve --mamba-ssm-cache-dtype float32 --no-enable-prefix-caching --max-num-seqs 87"
        + DEFAULT_COMMAND.removeprefix("vllm serve")
    )
    guarded = 'python -m arena.serving.guard --served-model-name "$SERVED_MODEL_NAME" "$CHECKPOINT"'
    assert slurm_command(tmp_path, nano, guarded) == guarded  # no vLLM: nothing to add
    broken = checkpoint(tmp_path / "broken", {**NANO_30B, "n_groups": 7})
    with pytest.raises(ServerStartError, match="broken: mamba_num_heads 64 is not a multiple"):
        slurm_command(tmp_path, broken)


def test_the_job_shell_hands_vllm_the_flags_before_the_settings_own(tmp_path):
    """The job runs the command with bash (arena/serving/slurm.py JOB_SCRIPT): a stand-in
    `vllm` on PATH records the argv bash gives it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "argv.json"
    fake = bin_dir / "vllm"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(seen)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    nano = checkpoint(tmp_path / "my model", NANO_30B)  # a space: quoting must hold
    setting = DEFAULT_COMMAND + " --max-num-seqs 16"  # an operator's own limit, after ours
    subprocess.run(
        ["bash", "-c", slurm_command(tmp_path, nano, setting)],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "CHECKPOINT": str(nano),
            "PORT": "8123",
            "SERVED_MODEL_NAME": "contestant-0123",
        },
        check=True,
    )
    assert json.loads(seen.read_text()) == [
        "serve", *HYBRID_FLAGS, "--max-num-seqs", "87",
        str(nano), "--host", "0.0.0.0", "--port", "8123",
        "--served-model-name", "contestant-0123", "--max-num-seqs", "16",
    ]  # fmt: skip


@pytest.mark.slow
def test_the_kits_as_built_give_their_architectures_flags(tiny_nemotron_models, tiny_models):
    for name in ("base", "instruct", "markdown"):
        assert command(tiny_models / name) == base(tiny_models / name)
        nemotron = checkpoint_architecture(tiny_nemotron_models / name)
        assert nemotron is not None and nemotron.pattern == "ME*E"
        assert command(tiny_nemotron_models / name)[len(BASE) :] == [
            *HYBRID_FLAGS,
            "--max-num-seqs",
            "256",
        ]
