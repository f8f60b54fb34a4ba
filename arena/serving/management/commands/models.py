from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster.memory_plan import (
    PRECISIONS,
    PlanError,
    PlanOptions,
    census,
    format_plan,
    memory_plan,
    read_hub_config,
)
from infra.tiny_models import build_tiny_models
from infra.tiny_models.config import ARCHITECTURES, DEFAULT_ARCH


class Command(BaseCommand):
    help = (
        "Model checkpoints: build the tiny offline model kit (tokenizer, base, instruct, markdown);"
        " plan the memory per GPU of training and serving a model from its config.json."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        build = actions.add_parser(
            "build-tiny", help="build the tiny models deterministically from a seed, no download"
        )
        build.add_argument("--out", type=Path, default=None, help="default: ARENA_MODELS_DIR")
        build.add_argument(
            "--arch",
            choices=ARCHITECTURES,
            default=DEFAULT_ARCH,
            help=f"default {DEFAULT_ARCH}: the competition's hybrid Mamba-attention MoE in miniature",
        )
        build.add_argument("--seed", type=int, default=0)
        build.add_argument("--force", action="store_true", help="rebuild even if up to date")
        plan = actions.add_parser(
            "plan",
            help="memory per GPU for full SFT (FSDP2, ZeRO-2, ZeRO-3), LoRA and vLLM serving, "
            "from a hub config.json (cluster/README.md, Memory planning)",
        )
        plan.add_argument("config", type=Path, help="a config.json, or a folder holding one")
        defaults = PlanOptions()
        plan.add_argument("--gpus", type=int, default=defaults.gpus)
        plan.add_argument("--gpu-memory-gib", type=float, default=defaults.gpu_memory_gib)
        plan.add_argument("--precision", choices=sorted(PRECISIONS), default="bf16-mixed")
        plan.add_argument("--seq-len", type=int, default=defaults.seq_len)
        plan.add_argument("--micro-batch", type=int, default=defaults.micro_batch)
        plan.add_argument("--lora-rank", type=int, default=defaults.lora_rank)
        plan.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
        plan.add_argument(
            "--tensor-parallel-size", type=int, default=defaults.tensor_parallel, help="vLLM's"
        )

    def handle(self, *args: object, **options: object) -> None:
        if options["action"] == "plan":
            self._plan(options)
            return
        out = options["out"] or settings.ARENA_MODELS_DIR
        assert isinstance(out, Path) and isinstance(options["seed"], int)
        manifest = build_tiny_models(
            out,
            arch=str(options["arch"]),
            seed=options["seed"],
            force=bool(options["force"]),
            log=lambda line: self.stdout.write(str(line)),
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"tiny models ready in {out} ({manifest.arch}, seed {manifest.seed})"
            )
        )

    def _plan(self, options: dict[str, Any]) -> None:
        try:
            plan_options = PlanOptions(
                gpus=options["gpus"],
                gpu_memory_gib=options["gpu_memory_gib"],
                precision=PRECISIONS[options["precision"]],
                seq_len=options["seq_len"],
                micro_batch=options["micro_batch"],
                lora_rank=options["lora_rank"],
                max_num_seqs=options["max_num_seqs"],
                tensor_parallel=options["tensor_parallel_size"],
            )
            plan = memory_plan(census(read_hub_config(options["config"])), plan_options)
        except PlanError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(format_plan(plan, str(options["config"])))
