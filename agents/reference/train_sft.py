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
import json
import sys
import time
from pathlib import Path

from agents.reference import training
from agents.reference.training import log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="TRL SFT (full or LoRA) for the reference agent")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--method", choices=["full", "lora"], default="full")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lr", type=float, default=None, help="default: 1e-3 full, 3e-3 LoRA")
    p.add_argument("--batch-size", type=int, default=8, help="chats per process per step")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--eval-prompts", type=Path, required=True, help="JSON list of prompts")
    p.add_argument("--summary", type=Path, required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = training.configure_torch(args.threads, args.seed)
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    tokenizer = training.load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    prompts = json.loads(args.eval_prompts.read_text(encoding="utf-8"))
    rows = training.read_jsonl(args.data)
    log(
        f"{args.method} SFT of {args.model} on {len(rows)} chats; world {training.world_size()}, "
        f"{threads} thread(s) per process, cuda={torch.cuda.is_available()}"
    )
    before = (
        training.end_of_turn_rate(model, tokenizer, prompts)[0] if training.rank() == 0 else 0.0
    )
    log(f"end-of-turn rate before: {before:.2f} on {len(prompts)} held-out prompts")

    peft_config = None
    if args.method == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_r,
            lora_alpha=2 * args.lora_r,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
    lr = args.lr or (1e-3 if args.method == "full" else 3e-3)
    config = SFTConfig(
        output_dir=str(args.out.parent / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=lr,
        lr_scheduler_type="cosine",
        warmup_steps=min(10, args.steps // 10),
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=args.seed,
        data_seed=args.seed,
        bf16=False,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        max_length=args.max_length,
        assistant_only_loss=True,
        eos_token=training.END_OF_TURN,
        **training.distributed_options(),
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    started = time.monotonic()
    trainer.train()
    train_seconds = time.monotonic() - started
    if training.rank() == 0:
        trained = trainer.model
        if args.method == "lora":
            trained = trained.merge_and_unload()  # a plain model: servable, no adapter files
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
