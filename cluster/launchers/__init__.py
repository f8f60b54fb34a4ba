"""sbatch launch scripts for multi-node training (torchrun + FSDP2, torchrun + DeepSpeed ZeRO)."""

from .render import KINDS, LauncherKind, render_launcher, zero_config

__all__ = ["KINDS", "LauncherKind", "render_launcher", "zero_config"]
