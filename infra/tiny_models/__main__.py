"""CLI: `python -m infra.tiny_models build [--arch A] [--out DIR] [--seed N] [--force] ...`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .build import DEFAULT_OUT_DIR, build_tiny_models
from .config import ARCHITECTURES, DEFAULT_ARCH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.tiny_models")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build tokenizer, base, instruct and markdown models")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help=f"default {DEFAULT_OUT_DIR}")
    b.add_argument(
        "--arch", choices=ARCHITECTURES, default=DEFAULT_ARCH, help=f"default {DEFAULT_ARCH}"
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.add_argument("--pretrain-steps", type=int, default=None)
    b.add_argument("--sft-steps", type=int, default=None)
    args = parser.parse_args(argv)

    manifest = build_tiny_models(
        args.out,
        arch=args.arch,
        seed=args.seed,
        force=args.force,
        pretrain_steps=args.pretrain_steps,
        sft_steps=args.sft_steps,
    )
    for name, rec in manifest.models.items():
        print(
            f"{name:9s} {manifest.model_dir(name)}  loss {rec.final_loss:.3f}  "
            f"{rec.size_bytes / 1e6:.1f} MB  sha256 {rec.sha256[:12]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
