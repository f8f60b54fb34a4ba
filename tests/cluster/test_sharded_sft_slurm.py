"""End to end on the real Slurm cluster: a rendered sharded-training job trains the tiny base
model on 2 nodes x 1 GPU (gloo on CPU), its loss goes down, and the checkpoint it writes has
learned to stop. On the tiny Nemotron-H (the competition's architecture): FSDP2
(`torchrun_fsdp2`, the platform's own environment) and DeepSpeed ZeRO-3 (`deepspeed_zero`, run by
the agents' training environment, where DeepSpeed is installed); on the dense Llama: FSDP2 and
ZeRO-2.

Jobs run as the submitting user (root here), so pytest's own temporary directory is readable by
the job; the job's directory is additionally made world-readable for clusters whose jobs run as
another user.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from django.conf import settings
from transformers import AutoModelForCausalLM, AutoTokenizer

from cluster.backends.slurm import SlurmBackend
from cluster.launchers.render import render_launcher
from infra.tiny_models import build_tiny_models
from tests.conftest import ROOT, TEST_MODELS_DIR, TEST_NEMOTRON_MODELS_DIR

# Like every test on the cluster, it fails (through the `slurm` fixture) rather than skips
# when the cluster is not running: CI starts it, and a skipped end-to-end test proves nothing.
pytestmark = pytest.mark.slow

WAIT_SECONDS = 600
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
PROMPTS = [
    "What is 2 plus 3?",
    "Name three animals.",
    "Tell me about the sun.",
    "How do I make tea?",
    "What color is grass?",
]


def _sacct(job_id: str, fields: str) -> str:
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", fields],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().splitlines()[0] if out.strip() else ""


def _wait(job_id: str, timeout: float) -> tuple[str, float | None]:
    """Poll until accounting has the job's end: (final state, seconds from submit until the
    poll first saw it RUNNING, or None)."""
    start = time.monotonic()
    running_after = None
    state = ""
    while time.monotonic() - start < timeout:
        # The controller (squeue) is current; the accounting database (sacct) lags a little but
        # keeps finished jobs, and NodeList/AllocTRES are read from it afterwards.
        live = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if live == "RUNNING" and running_after is None:
            running_after = time.monotonic() - start
        state = live if live and live not in TERMINAL else _sacct(job_id, "State").split(" ")[0]
        if state in TERMINAL:  # "CANCELLED by 0" -> "CANCELLED" above
            return state, running_after
        time.sleep(0.5)
    return state or "UNKNOWN", running_after


def _replies(path: Path) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    out = []
    for prompt in PROMPTS:
        enc = tok.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=48, do_sample=False)
        out.append(ids[0, enc["input_ids"].shape[1] :].tolist())
    return out


@dataclass(frozen=True)
class Sharding:
    launcher: str
    module: str
    python: str  # the interpreter that runs torchrun on each node
    steps: int
    learns_to_stop: bool  # enough steps that every reply must end on <|im_end|>
    zero_stage: int = 2
    arch: str = "nemotron_h"  # the tiny kit it trains (the competition's; or the dense Llama)


SHARDINGS = {
    # The competition's architecture: FSDP2 wraps each Nemotron-H block (Mamba, attention or
    # MoE alike), and ZeRO-3 shards the parameters too, where a MoE's memory matters.
    "fsdp2": Sharding("torchrun_fsdp2", "sft_fsdp2", sys.executable, steps=100, learns_to_stop=True),
    "deepspeed-zero3": Sharding(
        "deepspeed_zero", "sft_deepspeed", str(settings.AGENTS_TRAIN_PYTHON), steps=100,
        learns_to_stop=True, zero_stage=3,
    ),
    # The dense Llama stays supported.
    "fsdp2-llama": Sharding(
        "torchrun_fsdp2", "sft_fsdp2", sys.executable, steps=100, learns_to_stop=True, arch="llama",
    ),
    "deepspeed-zero2-llama": Sharding(
        "deepspeed_zero", "sft_deepspeed", str(settings.AGENTS_TRAIN_PYTHON), steps=100,
        learns_to_stop=True, zero_stage=2, arch="llama",
    ),
}  # fmt: skip


@pytest.mark.parametrize("sharding", SHARDINGS.values(), ids=SHARDINGS.keys())
def test_sharded_sft_on_two_slurm_nodes(
    sharding: Sharding, slurm: SlurmBackend, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if not Path(sharding.python).is_file():
        pytest.fail(
            f"no training environment at {sharding.python}: run infra/training_env/setup.sh "
            "as root (make test does)"
        )
    manifest = build_tiny_models(
        TEST_NEMOTRON_MODELS_DIR if sharding.arch == "nemotron_h" else TEST_MODELS_DIR,
        arch=sharding.arch,
        log=lambda line: print(f"[tiny-models] {line}"),
    )
    base = manifest.model_dir("base")
    run_dir = tmp_path_factory.mktemp(sharding.module)
    run_dir.chmod(0o755)
    out_dir = run_dir / "checkpoint"

    script = render_launcher(
        sharding.launcher,  # type: ignore[arg-type]
        job_name=f"test-{sharding.module}",
        account="agents",
        qos="normal",
        nodes=2,
        gpus_per_node=1,
        time_limit_minutes=10,
        workdir=run_dir,
        python=sharding.python,
        command=[
            "-m",
            f"cluster.training.{sharding.module}",
            "--model",
            str(base),
            "--out",
            str(out_dir),
            "--steps",
            str(sharding.steps),
            "--log-every",
            "10",
            "--seed",
            "0",
            "--threads",
            "1",  # two one-thread workers: the "nodes" share this machine's cores
        ],
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        output="slurm-%j.out",
        zero_stage=sharding.zero_stage,
    )
    (run_dir / "job.sbatch").write_text(script, encoding="utf-8")

    submitted = time.monotonic()
    proc = subprocess.run(
        ["sbatch", "--parsable", "job.sbatch"], cwd=run_dir, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"sbatch failed: {proc.stderr}"
    job_id = proc.stdout.strip().split(";")[0]
    log_file = run_dir / f"slurm-{job_id}.out"

    def log_text() -> str:
        text = log_file.read_text(errors="replace") if log_file.exists() else "(no output file)"
        return f"\n--- {log_file} ---\n{text}"

    state, running_after = _wait(job_id, WAIT_SECONDS)
    if state not in TERMINAL:
        subprocess.run(["scancel", job_id], check=False)
        pytest.fail(f"job {job_id} still {state} after {WAIT_SECONDS}s{log_text()}")
    times = _sacct(job_id, "Submit,Start,End,Elapsed")
    print(
        f"job {job_id}: {state}; seen RUNNING {running_after}s after submit; "
        f"sacct Submit|Start|End|Elapsed {times}; "
        f"submit-to-end {time.monotonic() - submitted:.1f}s{log_text()}"
    )
    assert state == "COMPLETED", f"job {job_id} ended {state}{log_text()}"

    node_list, alloc_tres = _sacct(job_id, "NodeList,AllocTRES").split("|")
    nodes = subprocess.run(
        ["scontrol", "show", "hostnames", node_list], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(set(nodes)) == 2, (node_list, nodes)
    assert "gres/gpu=2" in alloc_tres.split(","), alloc_tres

    log = log_text()
    assert "world 2 (local 1), backend gloo" in log, log
    if sharding.launcher == "deepspeed_zero":
        assert f"ZeRO stage {sharding.zero_stage}" in log, log
    else:  # one FSDP2 unit per decoder block, whatever the block's kind (Mamba, MoE, attention)
        config = json.loads((base / "config.json").read_text())
        kinds = config.get("layers_block_type") or config.get("layer_types") or []
        blocks = len(kinds) if config["model_type"] == "nemotron_h" else config["num_hidden_layers"]
        assert f"{blocks} FSDP2 layer units + root" in log, log
    losses = [float(x) for x in re.findall(r"step \d+/\d+ loss ([0-9.]+)", log)]
    assert len(losses) >= 2 and losses[-1] < losses[0] / 2, (losses, log)
    m = re.search(r'"final_loss": ([0-9.]+)', log)
    assert m and float(m.group(1)) < 0.5, log

    assert (out_dir / "model.safetensors").is_file(), log
    assert not list(out_dir.rglob("*.bin")), "safetensors only"
    for name in ["config.json", "generation_config.json", "tokenizer.json"]:
        assert (out_dir / name).is_file(), name
    assert json.loads((out_dir / "config.json").read_text())["model_type"] == sharding.arch

    tok = AutoTokenizer.from_pretrained(out_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token == "<|im_end|>"
    replies = _replies(out_dir)  # the saved checkpoint loads and generates
    if sharding.learns_to_stop:
        for prompt, new in zip(PROMPTS, replies, strict=True):
            assert new[-1] == eos and len(new) < 48, (prompt, tok.decode(new))
    for prompt, new in zip(PROMPTS, _replies(base), strict=True):
        assert eos not in new, (prompt, tok.decode(new))
