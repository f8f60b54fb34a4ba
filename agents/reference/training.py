"""What the reference agent's training jobs share (run by the training interpreter, which has
torch, transformers, trl and peft): threads, the agent's own end-of-turn check, and saving a
plain Hugging Face checkpoint the arena can validate and serve.

Launched by torchrun (one process per GPU): rank and world size come from its environment, and
the HF Trainer (through accelerate) joins the process group — NCCL with CUDA, gloo on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

END_OF_TURN = "<|im_end|>"
_STARTED = time.monotonic()


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def log(message: str) -> None:
    """A line of the job's log, from rank 0 only, with the seconds since the process started."""
    if rank() == 0:
        print(f"[reference-train {time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


def _positive_int(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


def configure_torch(threads: int, seed: int) -> int:
    """Threads per process (0: OMP_NUM_THREADS where set, as torchrun and the platform's FSDP2
    script take it, else the CPUs this process may use over the local world size), and the
    seeds, so the same run gives the same model."""
    import torch
    from transformers import set_seed

    if threads < 1:
        threads = _positive_int(os.environ.get("OMP_NUM_THREADS", ""))
    if threads < 1:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads = max(1, len(os.sched_getaffinity(0)) // max(1, local))
    torch.set_num_threads(threads)
    set_seed(seed)
    _quiet_progress_bars()
    return threads


def _quiet_progress_bars() -> None:
    """One job log line per logging step, not a progress bar per process and dataset pass, nor
    the renaming notices TRL's own calls trigger in transformers 5 (nothing the agent can fix)."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings(
        "ignore", message=r".*deprecated and will be removed in v6", category=FutureWarning
    )


def distributed_options() -> dict[str, Any]:
    """TrainingArguments for the device this process has: a GPU (NCCL) or the CPU (gloo)."""
    import torch

    if torch.cuda.is_available():
        return {"ddp_backend": "nccl"} if world_size() > 1 else {}
    return {"use_cpu": True, **({"ddp_backend": "gloo"} if world_size() > 1 else {})}


def job_arguments(
    description: str,
    *,
    steps: int,
    lr_help: str,
    batch_size: int,
    batch_help: str,
    max_length: int,
) -> argparse.ArgumentParser:
    """The arguments every training job of the reference agent takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", type=Path, required=True, help="the checkpoint to start from")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--method", choices=["full", "lora"], default="full")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--lr", type=float, default=None, help=lr_help)
    p.add_argument("--batch-size", type=int, default=batch_size, help=batch_help)
    p.add_argument("--max-length", type=int, default=max_length)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--eval-prompts", type=Path, required=True, help="JSON list of prompts")
    p.add_argument("--summary", type=Path, required=True)
    return p


def lora_targets(model: Any) -> tuple[list[str], list[str], list[str]]:
    """What LoRA adapts in `model`: (target_modules, target_parameters, what is left out and why).

    Every linear layer but the output head; on a hybrid Mamba model not the Mamba blocks'
    `out_proj` (PEFT refuses it: the fused Mamba kernels call it as a function, so an adapter
    there would be skipped); and a mixture of experts' fused expert weights (one 3-D parameter
    holding a matrix per expert, which no `nn.Linear` wraps) through PEFT's `target_parameters`.
    Modules are named in full, so a Mamba `out_proj` is never matched by another's name.
    """
    import torch

    modules: list[str] = []
    parameters: set[str] = set()
    left_out: set[str] = set()
    for name, module in model.named_modules():
        parent, _, leaf = name.rpartition(".")
        if isinstance(module, torch.nn.Linear) and leaf != "lm_head":
            if leaf == "out_proj" and "Mamba" in type(model.get_submodule(parent)).__name__:
                left_out.add("Mamba out_proj (PEFT cannot adapt it)")
            else:
                modules.append(name)
        if leaf == "experts":
            parameters.update(
                f"experts.{p}" for p, t in module.named_parameters(recurse=False) if t.ndim == 3
            )
    return modules, sorted(parameters), sorted(left_out)


def lora_config(args: argparse.Namespace, model: Any) -> Any:
    """The LoRA adapter for `--method lora` (None for a full fine-tune), on `lora_targets`."""
    if args.method != "lora":
        return None
    from peft import LoraConfig

    modules, parameters, left_out = lora_targets(model)
    kinds = sorted({m.rpartition(".")[2] for m in modules})
    log(
        f"LoRA r={args.lora_r} on {', '.join(kinds)}"
        + (f"; expert weights {', '.join(parameters)}" if parameters else "")
        + (f"; not on {', '.join(left_out)}" if left_out else "")
    )
    return LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
        target_modules=modules, target_parameters=parameters or None, task_type="CAUSAL_LM",
    )  # fmt: skip


def trainer_options(
    args: argparse.Namespace, *, learning_rate: float, warmup: int
) -> dict[str, Any]:
    """The TRL config fields the SFT and DPO jobs share: deterministic, quiet, no checkpoints
    of their own (the job saves the final model), on the device this process has."""
    return {
        "output_dir": str(args.out.parent / "trainer"),
        "max_steps": args.steps,
        "per_device_train_batch_size": args.batch_size,
        "learning_rate": learning_rate,
        "lr_scheduler_type": "cosine",
        "warmup_steps": min(warmup, args.steps // 10),
        "max_length": args.max_length,
        "logging_steps": max(1, args.steps // 10),
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "seed": args.seed,
        "data_seed": args.seed,
        "bf16": False,
        "dataloader_num_workers": 0,
        "ddp_find_unused_parameters": False,
        **distributed_options(),
    }


def trained_model(trainer: Any, method: str) -> Any:
    """The trained model as a plain checkpoint: LoRA adapters merged in, servable as is."""
    return trainer.model.merge_and_unload() if method == "lora" else trainer.model


def load_inputs(args: argparse.Namespace) -> tuple[Any, Any, list[str], list[dict[str, Any]]]:
    """What a training job starts from: the tokenizer and model of `--model` (float32), the
    held-out prompts it measures end-of-turn on, and its training rows."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    prompts = json.loads(args.eval_prompts.read_text(encoding="utf-8"))
    return tokenizer, model, prompts, read_jsonl(args.data)


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if END_OF_TURN not in tokenizer.get_vocab():
        raise SystemExit(f"{model_dir}: the tokenizer has no {END_OF_TURN} token")
    if not tokenizer.chat_template:
        raise SystemExit(f"{model_dir}: the tokenizer has no chat template")
    tokenizer.eos_token = END_OF_TURN  # the turn ends the reply: generate() stops there
    if tokenizer.pad_token is None:
        tokenizer.pad_token = END_OF_TURN
    return tokenizer


def end_of_turn_rate(
    model: Any, tokenizer: Any, prompts: list[str], *, max_new_tokens: int = 48
) -> tuple[float, list[str]]:
    """Share of greedy replies that end on the end-of-turn token within `max_new_tokens`, and
    the replies. The same check the arena's voters make: does the model stop?"""
    import torch

    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model.eval()
    stopped, replies = 0, []
    for prompt in prompts:
        enc = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        ).to(model.device)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eot,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[0, enc["input_ids"].shape[1] :].tolist()
        stopped += bool(new) and new[-1] == eot
        replies.append(tokenizer.decode(new, skip_special_tokens=False))
    return (stopped / len(prompts) if prompts else 0.0), replies


def save_checkpoint(model: Any, tokenizer: Any, out: Path) -> None:
    """A plain checkpoint: safetensors weights, config, tokenizer with its chat template, and a
    generation config whose eos is the end-of-turn token (so servers stop there)."""
    from transformers import GenerationConfig

    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model.config.eos_token_id = eot
    model.config.pad_token_id = tokenizer.pad_token_id
    generation = model.generation_config or GenerationConfig()
    generation.eos_token_id = eot
    generation.pad_token_id = tokenizer.pad_token_id
    generation.do_sample = False
    model.generation_config = generation
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for file in out.iterdir():  # save_pretrained writes through private (0600) temp files
        if file.is_file():
            file.chmod(0o644)


def final_loss(log_history: list[dict[str, Any]]) -> float | None:
    losses = [row["loss"] for row in log_history if "loss" in row]
    return round(float(losses[-1]), 4) if losses else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as rows:
        return [json.loads(line) for line in rows if line.strip()]


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    log(f"summary {json.dumps({k: v for k, v in summary.items() if k != 'samples'})}")


def finish_distributed() -> None:
    """End a distributed run once every rank has finished its work.

    The interpreter's own teardown of a gloo process group and the DDP reducer is not
    reliable here: one rank aborted ("terminate called without an active exception") or hung
    in a destructor after the checkpoint was saved, failing or stalling a job that had
    succeeded. So after a last barrier each rank flushes its output and exits at once."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
