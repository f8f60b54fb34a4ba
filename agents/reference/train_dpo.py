"""The reference agent's DPO job: TRL `DPOTrainer` from a parent checkpoint on preference pairs
(JSONL in TRL's conversational format: `prompt`, `chosen`, `rejected` message lists), full
fine-tune or LoRA (merged at the end); the reference model is the frozen parent. Run by torchrun:

    python -m torch.distributed.run --nproc_per_node=2 -m agents.reference.train_dpo \\
        --model PARENT --data pairs.jsonl --out checkpoint --steps 40 \\
        --eval-prompts prompts.json --summary summary.json

Rank 0 checks that the result still stops at end-of-turn, saves it (safetensors, eos =
`<|im_end|>`) and writes the summary the agent reads (with TRL's reward accuracy and margin).
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
    p = argparse.ArgumentParser(description="TRL DPO for the reference agent")
    p.add_argument("--model", type=Path, required=True, help="the parent checkpoint")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--method", choices=["full", "lora"], default="full")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--lr", type=float, default=None, help="default: 1e-4 full, 1e-3 LoRA")
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument(
        "--sft-weight",
        type=float,
        default=1.0,
        help="weight of the chosen answers' own likelihood added to the DPO loss (0: plain DPO)",
    )
    p.add_argument("--batch-size", type=int, default=4, help="pairs per process per step")
    p.add_argument("--max-length", type=int, default=256)
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
    from trl import DPOConfig, DPOTrainer

    tokenizer = training.load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    prompts = json.loads(args.eval_prompts.read_text(encoding="utf-8"))
    rows = training.read_jsonl(args.data)
    log(
        f"{args.method} DPO from {args.model} on {len(rows)} preference pairs; world "
        f"{training.world_size()}, {threads} thread(s) per process, cuda={torch.cuda.is_available()}"
    )
    peft_config = None
    if args.method == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
            target_modules="all-linear", task_type="CAUSAL_LM",
        )  # fmt: skip
    lr = args.lr or (1e-4 if args.method == "full" else 1e-3)
    config = DPOConfig(
        output_dir=str(args.out.parent / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=lr,
        lr_scheduler_type="cosine",
        warmup_steps=min(5, args.steps // 10),
        beta=args.beta,
        # DPO alone can please the preference by making every answer shorter and worse; the
        # likelihood of the chosen answers keeps them what they were (as in RPO).
        loss_type=["sigmoid", "sft"] if args.sft_weight else ["sigmoid"],
        loss_weights=[1.0, args.sft_weight] if args.sft_weight else None,
        max_length=args.max_length,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=args.seed,
        data_seed=args.seed,
        bf16=False,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        **training.distributed_options(),
    )
    trainer = DPOTrainer(
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
            trained = trained.merge_and_unload()
        after, replies = training.end_of_turn_rate(trained, tokenizer, prompts)
        log(f"end-of-turn rate after DPO: {after:.2f}")
        training.save_checkpoint(trained, tokenizer, args.out)
        history = trainer.state.log_history
        training.write_summary(
            args.summary,
            {
                "method": f"{args.method} DPO (TRL DPOTrainer, beta {args.beta}"
                + (f", SFT weight {args.sft_weight})" if args.sft_weight else ")"),
                "steps": trainer.state.global_step,
                "final_loss": training.final_loss(history),
                "reward_accuracy": _last(history, "rewards/accuracies"),
                "reward_margin": _last(history, "rewards/margins"),
                "learning_rate": lr,
                "batch_size_per_process": args.batch_size,
                "world_size": training.world_size(),
                "backend": "nccl" if torch.cuda.is_available() else "gloo",
                "train_seconds": round(train_seconds, 1),
                "pairs": len(rows),
                "eval_prompts": len(prompts),
                "end_of_turn_rate_after": after,
                "samples": dict(zip(prompts[:4], replies[:4], strict=False)),
            },
        )
        log(f"saved {args.out}")
    training.finish_distributed()  # does not return in a distributed run
    return 0


def _last(history: list[dict[str, float]], key: str) -> float | None:
    values = [row[key] for row in history if key in row]
    return round(float(values[-1]), 4) if values else None


if __name__ == "__main__":
    sys.exit(main())
