"""`python -m agents.reference phase1|phase2 ...`: the reference agent's command line.

    python -m agents.reference phase1 --recipe sft|lora|sft-dpo --base-model DIR [options]
    python -m agents.reference phase2 --recipe sft|lora|sft-dpo [--votes FILE] [--phase LABEL]
                                      [--parent CHECKPOINT] [options]

Run it in the agent's sandbox, as the agent's Unix user (it talks to the platform through
~/.arena/bin/arena-agent). The training interpreter comes from --python, else
$ARENA_TRAIN_PYTHON, else /opt/rsi-arena/train-env/bin/python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from agents.reference.agent import (
    DEFAULT_TRAIN_PYTHON,
    RECIPES,
    AgentFailure,
    Options,
    Progress,
    phase1,
    phase2,
)
from agents.reference.client import ArenaAgent, PlatformError
from agents.reference.preferences import ExportError


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m agents.reference", description=__doc__)
    phases = top.add_subparsers(dest="command", required=True)
    one = phases.add_parser("phase1", help="train from the base model and nominate")
    one.add_argument("--base-model", type=Path, required=True, help="the base checkpoint folder")
    one.add_argument("--parent", type=int, help="a registered checkpoint the base model is")
    one.add_argument("--chats", type=int, default=400, help="generated instruction chats")
    two = phases.add_parser("phase2", help="DPO on the votes from the phase-1 checkpoint")
    two.add_argument("--votes", type=Path, help="a vote export already made (else: export now)")
    two.add_argument(
        "--phase",
        dest="votes_phase",
        help="the phase whose votes to export (default: the platform's)",
    )
    two.add_argument(
        "--parent", type=int, help="checkpoint to start from (default: my latest nomination)"
    )
    for sub in (one, two):
        sub.add_argument("--recipe", choices=sorted(RECIPES), default="sft")
        sub.add_argument(
            "--python",
            default=os.environ.get("ARENA_TRAIN_PYTHON") or DEFAULT_TRAIN_PYTHON,
            help="the training interpreter (torch, transformers, trl, peft)",
        )
        sub.add_argument(
            "--run-dir", type=Path, help="default: ~/reference-agent/PHASE-RECIPE-TIME"
        )
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument("--steps", type=int, default=120, help="SFT steps")
        sub.add_argument("--dpo-steps", type=int, default=30)
        sub.add_argument("--gpus", type=int, default=2, help="GPUs per node = torchrun processes")
        sub.add_argument("--nodes", type=int, default=1)
        sub.add_argument("--time", type=int, default=20, metavar="MINUTES", help="per job")
        sub.add_argument("--max-wait", type=float, default=60, metavar="MINUTES", help="per job")
        sub.add_argument("--eval-prompts", type=int, default=16)
        sub.add_argument("--min-end-of-turn-rate", type=float, default=0.8)
        sub.add_argument("--poll", type=float, default=2.0, metavar="SECONDS")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    recipe = RECIPES[args.recipe]
    run_dir = args.run_dir or (
        Path.home()
        / "reference-agent"
        / f"{args.command}-{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    options = Options(
        recipe=recipe, run_dir=run_dir.absolute(), python=args.python, seed=args.seed,
        chats=getattr(args, "chats", 400), sft_steps=args.steps, dpo_steps=args.dpo_steps,
        gpus=args.gpus, nodes=args.nodes, minutes=args.time, max_wait_minutes=args.max_wait,
        eval_prompts=args.eval_prompts, min_end_of_turn_rate=args.min_end_of_turn_rate,
        poll_s=args.poll,
    )  # fmt: skip
    progress = Progress(write=lambda line: print(line, flush=True))
    platform = ArenaAgent()
    try:
        if args.command == "phase1":
            phase1(
                platform=platform, options=options, base_model=args.base_model.absolute(),
                parent=args.parent, progress=progress,
            )  # fmt: skip
        else:
            phase2(
                platform=platform, options=options, votes=args.votes, phase=args.votes_phase,
                parent=args.parent, progress=progress,
            )  # fmt: skip
    except (AgentFailure, PlatformError, ExportError) as failed:
        print(f"reference-agent: {failed}", file=sys.stderr, flush=True)
        return 1
    return 0
