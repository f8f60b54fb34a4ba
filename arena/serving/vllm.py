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
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KEY_VARIABLE = "VLLM_API_KEY"
EXECUTABLE_VARIABLE = "ARENA_VLLM_EXECUTABLE"


@dataclass(frozen=True)
class VllmOptions:
    """The engine settings the platform chooses (never the agent)."""

    dtype: str = "auto"  # the checkpoint's own (bf16 for most), "bfloat16", "float16"
    max_model_len: int = 0  # 0: the model's own context length
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1


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
    """`vllm serve` for one checkpoint; the key goes in the environment (`KEY_VARIABLE`)."""
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
    return command


def open_health(base_url: str) -> bool:
    """`GET /health` with no key (vLLM's is open): the key is never sent to check readiness."""
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False
