"""The same SFT as `sft_fsdp2`, sharded by DeepSpeed ZeRO instead of FSDP2; launched by the
`deepspeed_zero` sbatch template, which appends `--deepspeed --deepspeed_config PATH`.

    python -m torch.distributed.run --nproc_per_node=2 -m cluster.training.sft_deepspeed \\
        --model var/test-models/base --out /tmp/sft-ds --steps 100 \\
        --deepspeed --deepspeed_config ds_zero2.json

Data, loss (assistant tokens, normalised by the global batch's token count), optimiser
(torch AdamW: DeepSpeed's own CPU Adam compiles for minutes) and the saved checkpoint are
those of `sft_fsdp2`; `deepspeed.initialize` wraps model, optimiser and schedule, and the ZeRO
stage, gradient clipping and precision come from the config file. DeepSpeed is not a
dependency of this project: without it the arguments still parse, and `main` stops with a
message that says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cluster.training.schedule import warmup_cosine
from cluster.training.sft_fsdp2 import (
    Dist,
    arg_parser,
    batches,
    chat_tokenizer,
    check_args,
    configure_torch,
    encode,
    global_token_loss,
    load_chats,
    save,
    tied_duplicates,
)

NOT_INSTALLED = (
    "sft_deepspeed: DeepSpeed is not installed in this Python environment ({python}); "
    "install it there (pip install deepspeed) or train with the torchrun_fsdp2 launcher and "
    "cluster.training.sft_fsdp2, which need nothing else"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arg_parser(__doc__.split("\n\n")[0])
    try:
        import deepspeed
    except ImportError:
        # The options deepspeed.add_config_arguments defines, so that what the launcher
        # passes parses either way; `main` then says what is missing.
        group = p.add_argument_group("DeepSpeed")
        group.add_argument("--deepspeed", action="store_true", help="enable DeepSpeed")
        group.add_argument("--deepspeed_config", default=None, help="DeepSpeed JSON config")
    else:
        deepspeed.add_config_arguments(p)
    args = check_args(p, p.parse_args(argv))
    if not args.deepspeed or not args.deepspeed_config:
        p.error("--deepspeed --deepspeed_config PATH are required (the launcher passes them)")
    return args


# HF Trainer's rule for DeepSpeed's "auto" bucket sizes. DeepSpeed's own default (5e8
# elements: a 2 GB fp32 bucket reduced every step) is made for billion-parameter models; on the
# tiny ones it made a ZeRO-2 step 50x slower (4 s instead of 0.08 on two CPU processes).
_AUTO_BUCKETS = {
    "reduce_bucket_size": lambda hidden: hidden * hidden,
    "stage3_prefetch_bucket_size": lambda hidden: int(0.9 * hidden * hidden),
    "stage3_param_persistence_threshold": lambda hidden: 10 * hidden,
}


def size_buckets(config: dict[str, Any], hidden_size: int) -> dict[str, int]:
    """Fill the ZeRO bucket sizes the config leaves out or sets to "auto", in place, from the
    model's hidden size; returns what it set. Values the file gives are kept."""
    zero = config.setdefault("zero_optimization", {})
    stage = int(zero.get("stage", 0))
    wanted = ["reduce_bucket_size"] if stage < 3 else list(_AUTO_BUCKETS)
    sized = {}
    for key in wanted:
        if zero.get(key, "auto") == "auto":
            zero[key] = sized[key] = _AUTO_BUCKETS[key](hidden_size)
    return sized


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import deepspeed
    except ImportError:
        raise SystemExit(NOT_INSTALLED.format(python=sys.executable)) from None
    start = time.perf_counter()
    cuda = torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    d = Dist(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=device,
        backend=dist.get_backend(),
    )
    threads = configure_torch(args, d)

    def log(msg: str) -> None:
        if d.rank == 0:
            print(f"[sft_deepspeed {time.perf_counter() - start:6.1f}s] {msg}", flush=True)

    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    config = json.loads(Path(args.deepspeed_config).read_text(encoding="utf-8"))
    log(
        f"world {d.world_size} (local {d.local_world_size}), backend {d.backend}, device "
        f"{d.device}, {threads} threads/process, DeepSpeed {deepspeed.__version__}, ZeRO stage "
        f"{config.get('zero_optimization', {}).get('stage', 0)}"
    )
    tokenizer, eot_id, pad_id = chat_tokenizer(args.model)
    shard = load_chats(args)[d.rank :: d.world_size]
    if len(shard) < args.batch_size:
        raise ValueError(
            f"rank {d.rank} has {len(shard)} chats, fewer than --batch-size {args.batch_size}"
        )
    examples = [encode(tokenizer, m, args.max_length) for m in shard]

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tied = tied_duplicates(model)
    sized = size_buckets(config, model.config.hidden_size)
    if sized:
        log(
            "bucket sizes from the model's hidden size: "
            + ", ".join(f"{k}={v}" for k, v in sized.items())
        )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(min(args.warmup_steps, args.steps), args.steps)
    )
    engine: Any
    args.deepspeed_config = None  # the config goes in resolved; DeepSpeed refuses both
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, optimizer=optimizer, lr_scheduler=schedule, config=config
    )
    engine.train()
    data = batches(examples, args.batch_size, pad_id, seed=args.seed * 1000 + d.rank)
    losses: list[float] = []
    for step in range(1, args.steps + 1):
        loss, mean_loss = global_token_loss(engine, next(data), d)
        engine.backward(loss)
        engine.step()  # clipping (config), optimiser, schedule, zero_grad
        losses.append(mean_loss)
        if step % args.log_every == 0 or step == args.steps:
            log(
                f"step {step}/{args.steps} loss {losses[-1]:.4f} lr {schedule.get_last_lr()[0]:.2e}"
            )
    tail = losses[-10:]
    if engine.zero_optimization_stage() == 3:  # collective: parameters are partitioned
        state = engine._zero3_consolidated_16bit_state_dict()
    else:  # ZeRO 1-2 partition optimiser state and gradients; every rank has the weights
        state = {k: v.detach().cpu() for k, v in engine.module.state_dict().items()}
    if d.rank == 0:
        for name in tied:
            state.pop(name, None)
        save(args, engine.module, state, tokenizer, eot_id, pad_id, GenerationConfig)
        summary = {"steps": args.steps, "final_loss": round(sum(tail) / len(tail), 4)}
        log(f"saved {args.out}; summary {json.dumps(summary)}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # As in sft_fsdp2: every rank passed the last barrier with the checkpoint on disk, so leave
    # without the C++ destructors in which gloo's threads sometimes abort at interpreter exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
