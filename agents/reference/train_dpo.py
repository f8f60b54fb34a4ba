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
import sys
import time

from agents.reference import training
from agents.reference.training import log


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = training.job_arguments(
        "TRL DPO for the reference agent",
        steps=40,
        lr_help="default: 1e-4 full, 1e-3 LoRA",
        batch_size=4,
        batch_help="pairs per process per step",
        max_length=256,
    )
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument(
        "--sft-weight",
        type=float,
        default=1.0,
        help="weight of the chosen answers' own likelihood added to the DPO loss (0: plain DPO)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = training.configure_torch(args.threads, args.seed)
    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    tokenizer, model, prompts, rows = training.load_inputs(args)
    log(
        f"{args.method} DPO from {args.model} on {len(rows)} preference pairs; world "
        f"{training.world_size()}, {threads} thread(s) per process, cuda={torch.cuda.is_available()}"
    )
    lr = args.lr or (1e-4 if args.method == "full" else 1e-3)
    config = DPOConfig(
        **training.trainer_options(args, learning_rate=lr, warmup=5),
        beta=args.beta,
        # DPO alone can please the preference by making every answer shorter and worse; the
        # likelihood of the chosen answers keeps them what they were (as in RPO).
        loss_type=["sigmoid", "sft"] if args.sft_weight else ["sigmoid"],
        loss_weights=[1.0, args.sft_weight] if args.sft_weight else None,
    )
    trainer = DPOTrainer(
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
