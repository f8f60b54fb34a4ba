"""Full supervised fine-tuning of a causal LM with FSDP2, launched by torchrun.

    python -m torch.distributed.run --nproc_per_node=2 -m cluster.training.sft_fsdp2 \\
        --model var/test-models/base --out /tmp/sft --steps 100

Every process loads the checkpoint, then `fully_shard` shards each decoder layer and the root
module over all ranks (FSDP2: parameters are DTensors sharded on dim 0). Each rank trains on its
own slice of the chats (`chats[rank::world_size]`); the loss covers assistant tokens only
(the chat template's `{% generation %}` block, stop token included) and is normalised by the
assistant-token count of the whole global batch, so the result does not depend on how tokens
fall across ranks. At the end the full state dict is gathered to CPU and rank 0 writes a plain
Hugging Face checkpoint (safetensors, tokenizer, generation_config with eos = `<|im_end|>`).

Backend: `nccl` when CUDA is available (each process takes GPU `LOCAL_RANK` among those in
CUDA_VISIBLE_DEVICES), else `gloo` on CPU. Run without torchrun it is a world of one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from cluster.training.schedule import warmup_cosine

IGNORE = -100
END_OF_TURN = "<|im_end|>"
Example = tuple[list[int], list[int]]  # input_ids, assistant mask (1 = trained on)


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arg_parser(__doc__.split("\n\n")[0])
    p.add_argument(
        "--bf16",
        action="store_true",
        help="FSDP2 mixed precision: bf16 compute and all-gathers, fp32 gradient reduction and "
        "fp32 master weights (for GPUs; off by default, CPU runs stay fp32)",
    )
    return check_args(p, p.parse_args(argv))


def arg_parser(description: str) -> argparse.ArgumentParser:
    """The SFT options, shared with the DeepSpeed entry point (`sft_deepspeed`)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", type=Path, required=True, help="HF checkpoint directory")
    p.add_argument("--out", type=Path, required=True, help="where rank 0 writes the checkpoint")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=8, help="chats per rank per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data", type=Path, default=None, help='JSONL of {"messages": [...]} (default: generated)'
    )
    p.add_argument("--num-chats", type=int, default=400, help="generated chats (without --data)")
    p.add_argument("--max-length", type=int, default=512, help="truncate chats to this many tokens")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads per process (0: OMP_NUM_THREADS, else the CPUs this process "
        "may use divided by the local world size)",
    )
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    for name in ("steps", "batch_size", "num_chats", "max_length", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lr <= 0:
        p.error("--lr must be > 0")
    return args


# --- distributed setup -----------------------------------------------------------------------


def init_distributed() -> Dist:
    """Process group from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""
    if "RANK" not in os.environ:  # plain `python -m ...`: a world of one on a free port
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        # CUDA_VISIBLE_DEVICES (set by Slurm for --gres=gpu:N) renumbers the node's GPUs 0..N-1;
        # torchrun's LOCAL_RANK picks one of them.
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} visible GPUs "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
            )
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device, timeout=timedelta(minutes=10))
    else:
        device, backend = torch.device("cpu"), "gloo"
        dist.init_process_group(backend, timeout=timedelta(minutes=10))
    return Dist(rank, world_size, local_rank, local_world_size, device, backend)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def configure_torch(args: argparse.Namespace, d: Dist) -> int:
    """Seeds, deterministic kernels and a thread count that does not oversubscribe the CPUs."""
    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads < 1:
        threads = max(1, len(os.sched_getaffinity(0)) // max(1, d.local_world_size))
    torch.set_num_threads(threads)
    if d.device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=d.device.type == "cuda")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    return threads


# --- data ------------------------------------------------------------------------------------


def load_chats(args: argparse.Namespace) -> list[list[dict[str, str]]]:
    if args.data is not None:
        chats = []
        with args.data.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    messages = json.loads(line).get("messages")
                    if not isinstance(messages, list) or not messages:
                        raise ValueError(f"{args.data}:{n}: expected {{'messages': [...]}}")
                    chats.append(messages)
        return chats
    from infra.tiny_models import corpus  # the tiny-model kit's chats, plain answers

    rng = random.Random(args.seed)
    return [corpus.to_messages(conv, "plain") for conv in corpus.chats(rng, args.num_chats)]


def encode(tokenizer: Any, messages: list[dict[str, str]], max_length: int) -> Example:
    """Token ids and the assistant mask from the template's `{% generation %}` markers.

    Templates without the markers yield an all-zero mask; then the mask is recovered by
    rendering growing prefixes of the chat: what follows each assistant generation prompt, up
    to and including the tokenizer's eos (the end-of-turn token).
    """
    enc = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
    if not any(mask) and any(m["role"] == "assistant" for m in messages):
        mask = _prefix_mask(tokenizer, messages, ids)
    return ids[:max_length], mask[:max_length]


def _prefix_mask(tokenizer: Any, messages: list[dict[str, str]], ids: list[int]) -> list[int]:
    def render(msgs: list[dict[str, str]], gen_prompt: bool) -> list[int]:
        out = tokenizer.apply_chat_template(
            msgs, tokenize=True, return_dict=True, add_generation_prompt=gen_prompt
        )
        return list(out["input_ids"])

    eos = tokenizer.eos_token_id
    mask = [0] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(render(messages[:i], True))
        upto = render(messages[: i + 1], False)
        if ids[: len(upto)] != upto:
            raise ValueError("chat template is not prefix-stable; add {% generation %} markers")
        span = upto[start:]
        if eos in span:  # stop after the end-of-turn token (not the newline the template adds)
            span = span[: len(span) - span[::-1].index(eos)]
        for j in range(start, start + len(span)):
            mask[j] = 1
    return mask


def batches(
    examples: list[Example], batch_size: int, pad_id: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Endless shuffled epochs of right-padded (input_ids, attention_mask, labels)."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(examples), generator=gen).tolist()
        for i in range(0, len(order) - batch_size + 1, batch_size):
            rows = [examples[j] for j in order[i : i + batch_size]]
            width = max(len(ids) for ids, _ in rows)
            ids = torch.full((len(rows), width), pad_id)
            att = torch.zeros((len(rows), width), dtype=torch.long)
            lab = torch.full((len(rows), width), IGNORE)
            for r, (row_ids, row_mask) in enumerate(rows):
                t = torch.tensor(row_ids)
                ids[r, : len(t)] = t
                att[r, : len(t)] = 1
                lab[r, : len(t)] = torch.where(torch.tensor(row_mask) == 1, t, IGNORE)
            yield ids, att, lab


# --- training --------------------------------------------------------------------------------


def shard_model(model: torch.nn.Module, d: Dist, *, bf16: bool = False) -> int:
    """FSDP2: each decoder layer is its own unit, then the root (embeddings, norm, head).
    With `bf16`, parameters are gathered and used in bf16, gradients reduced in fp32."""
    mesh = init_device_mesh(d.device.type, (d.world_size,))
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    layer_classes = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return len(layers)


def tied_duplicates(model: torch.nn.Module) -> list[str]:
    """Names of parameters that are the same tensor as an earlier one (tied weights)."""
    seen: set[int] = set()
    out = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            out.append(name)
        seen.add(id(param))
    return out


def chat_tokenizer(model: str) -> tuple[Any, int, int]:
    """The model's tokenizer, its end-of-turn id, and the padding id (end-of-turn if none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    eot_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if eot_id is None or eot_id == tokenizer.unk_token_id:
        raise ValueError(f"{model}: tokenizer has no {END_OF_TURN} token")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eot_id
    return tokenizer, eot_id, pad_id  # type: ignore[return-value]  # transformers/torch stubs


def global_token_loss(model: Any, batch: tuple[torch.Tensor, ...], d: Dist) -> tuple[Any, float]:
    """This rank's loss to backpropagate, and the mean loss per assistant token over all ranks.

    Normalised by the global number of assistant tokens, times world_size because FSDP and
    DeepSpeed both average gradients over ranks: every token weighs the same whichever rank
    it landed on."""
    ids, att, lab = (t.to(d.device) for t in batch)
    logits = model(input_ids=ids, attention_mask=att).logits
    targets = lab[:, 1:]
    loss_sum = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(),
        targets.reshape(-1),
        ignore_index=IGNORE,
        reduction="sum",
    )
    stats = torch.stack([loss_sum.detach(), (targets != IGNORE).sum().to(loss_sum.dtype)])
    dist.all_reduce(stats)
    total_tokens = stats[1].clamp(min=1)
    return loss_sum * d.world_size / total_tokens, (stats[0] / total_tokens).item()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    d = init_distributed()
    threads = configure_torch(args, d)

    def log(msg: str) -> None:
        if d.rank == 0:
            print(f"[sft_fsdp2 {time.perf_counter() - start:6.1f}s] {msg}", flush=True)

    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-process bars for a 1-shard load/save are noise

    log(
        f"world {d.world_size} (local {d.local_world_size}), backend {d.backend}, "
        f"device {d.device}, {threads} threads/process, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}, "
        f"master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    )
    tokenizer, eot_id, pad_id = chat_tokenizer(args.model)

    chats = load_chats(args)
    shard = chats[d.rank :: d.world_size]
    if len(shard) < args.batch_size:
        raise ValueError(
            f"rank {d.rank} has {len(shard)} chats, fewer than --batch-size {args.batch_size}"
        )
    examples = [encode(tokenizer, m, args.max_length) for m in shard]
    if not any(any(mask) for _, mask in examples):
        raise ValueError("no assistant tokens to train on")
    log(f"{len(chats)} chats, {len(shard)} on rank 0, batch {args.batch_size}/rank")

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.to(d.device)  # type: ignore[arg-type]  # transformers/torch stubs
    n_params = sum(p.numel() for p in model.parameters())
    tied = tied_duplicates(model)  # e.g. lm_head.weight when embeddings are tied
    n_units = shard_model(model, d, bf16=args.bf16)
    log(f"{type(model).__name__}: {n_params:,} parameters, {n_units} FSDP2 layer units + root")

    model.train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(min(args.warmup_steps, args.steps), args.steps)
    )
    data = batches(examples, args.batch_size, pad_id, seed=args.seed * 1000 + d.rank)
    losses: list[float] = []
    train_start = time.perf_counter()
    first_step_end = train_start
    for step in range(1, args.steps + 1):
        loss, mean_loss = global_token_loss(model, next(data), d)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(mean_loss)
        if step == 1:
            first_step_end = time.perf_counter()  # the first step also warms kernels up
        if step % args.log_every == 0 or step == args.steps:
            log(
                f"step {step}/{args.steps} loss {losses[-1]:.4f} "
                f"lr {sched.get_last_lr()[0]:.2e} ({time.perf_counter() - train_start:.1f}s)"
            )
    train_seconds = time.perf_counter() - train_start
    peak_mib = (
        round(torch.cuda.max_memory_allocated(d.device) / 2**20, 1)
        if d.device.type == "cuda"
        else None
    )
    tail = losses[-10:]
    final_loss = sum(tail) / len(tail)

    # Collective: every rank takes part in the all-gather, rank 0 keeps the full CPU copy.
    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if d.rank == 0:
        for name in tied:  # one copy on disk, as save_pretrained writes an unsharded model
            state.pop(name, None)
        save(args, model, state, tokenizer, eot_id, pad_id, GenerationConfig)  # type: ignore[arg-type]  # transformers/torch stubs
        summary = {
            "steps": args.steps,
            "final_loss": round(final_loss, 4),
            "train_seconds": round(train_seconds, 2),
            "step_seconds": round(train_seconds / args.steps, 4),
            "step_seconds_after_first": (
                round((train_start + train_seconds - first_step_end) / (args.steps - 1), 4)
                if args.steps > 1
                else None
            ),
            "peak_gpu_memory_mib": peak_mib,
            "bf16": args.bf16,
            "world_size": d.world_size,
            "backend": d.backend,
            "seed": args.seed,
        }
        log(f"saved {args.out}; summary {json.dumps(summary)}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def save(
    args: argparse.Namespace,
    model: Any,
    state: dict[str, torch.Tensor],
    tokenizer: Any,
    eot_id: int,
    pad_id: int,
    generation_config_cls: Any,
) -> None:
    """Write a plain HF checkpoint from the gathered full state dict (rank 0 only).

    A skeleton of the model class is built on the meta device (no memory) just to drive
    `save_pretrained`, which writes `state` as safetensors and drops tied duplicates.
    """
    from transformers import AutoModelForCausalLM

    config = model.config
    config.eos_token_id = eot_id
    config.pad_token_id = pad_id
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    try:
        gen = generation_config_cls.from_pretrained(args.model)
    except OSError:
        gen = generation_config_cls()
    gen.eos_token_id = eot_id
    gen.pad_token_id = pad_id
    skeleton.generation_config = gen
    args.out.mkdir(parents=True, exist_ok=True)
    skeleton.save_pretrained(args.out, state_dict=state)
    tokenizer.eos_token = END_OF_TURN
    tokenizer.save_pretrained(args.out)
    for f in args.out.iterdir():  # save_pretrained writes via private (0600) temp files
        if f.is_file():
            f.chmod(0o644)


if __name__ == "__main__":
    code = main()
    # Every rank has passed the last barrier and the checkpoint is on disk: leave without
    # running C++ destructors. Torch's gloo threads sometimes abort in them at interpreter exit
    # ("terminate called without an active exception", SIGABRT), failing a finished job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
