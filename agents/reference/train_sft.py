"""The reference agent's SFT job: TRL `SFTTrainer`, full fine-tune or LoRA (merged at the end),
on chat JSONL (`{"messages": [...]}` a line), loss on the assistant's tokens only (its answer
and the `<|im_end|>` that ends it). Run by torchrun, one process per GPU:

    python -m torch.distributed.run --nproc_per_node=2 -m agents.reference.train_sft \\
        --model BASE --data sft.jsonl --out checkpoint --method full --steps 150 \\
        --eval-prompts prompts.json --summary summary.json

Rank 0 checks the end-of-turn rate on the held-out prompts before and after training, saves
the checkpoint (safetensors, eos = `<|im_end|>`) and writes the summary the agent reads.
"""

from __future__ import annotations

import argparse
import sys
import time

from agents.reference import training
from agents.reference.training import log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return training.job_arguments(
        "TRL SFT (full or LoRA) for the reference agent",
        steps=150,
        lr_help="default: 1e-3 full, 3e-3 LoRA",
        batch_size=8,
        batch_help="chats per process per step",
        max_length=128,
    ).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = training.configure_torch(args.threads, args.seed)
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    tokenizer, model, prompts, rows = training.load_inputs(args)
    log(
        f"{args.method} SFT of {args.model} on {len(rows)} chats; world {training.world_size()}, "
        f"{threads} thread(s) per process, cuda={torch.cuda.is_available()}"
    )
    before = (
        training.end_of_turn_rate(model, tokenizer, prompts)[0] if training.rank() == 0 else 0.0
    )
    log(f"end-of-turn rate before: {before:.2f} on {len(prompts)} held-out prompts")

    lr = args.lr or (1e-3 if args.method == "full" else 3e-3)
    config = SFTConfig(
        **training.trainer_options(args, learning_rate=lr, warmup=10),
        weight_decay=0.0,
        max_grad_norm=1.0,
        assistant_only_loss=True,
        eos_token=training.END_OF_TURN,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=training.lora_config(args, model),
    )
    started = time.monotonic()
    trainer.train()
    train_seconds = time.monotonic() - started
    if training.rank() == 0:
        trained = training.trained_model(trainer, args.method)
        after, replies = training.end_of_turn_rate(trained, tokenizer, prompts)
        log(f"end-of-turn rate after: {after:.2f}")
        training.save_checkpoint(trained, tokenizer, args.out)
        training.write_summary(
            args.summary,
            {
                "method": f"{args.method} SFT (TRL SFTTrainer)",
                "steps": trainer.state.global_step,
                "final_loss": training.final_loss(trainer.state.log_history),
                "learning_rate": lr,
                "batch_size_per_process": args.batch_size,
                "world_size": training.world_size(),
                "backend": "nccl" if torch.cuda.is_available() else "gloo",
                "train_seconds": round(train_seconds, 1),
                "chats": len(rows),
                "eval_prompts": len(prompts),
                "end_of_turn_rate_before": before,
                "end_of_turn_rate_after": after,
                "samples": dict(zip(prompts[:4], replies[:4], strict=False)),
            },
        )
        log(f"saved {args.out}")
    training.finish_distributed()  # does not return in a distributed run
    return 0


if __name__ == "__main__":
    sys.exit(main())
