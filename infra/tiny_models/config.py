"""Build configuration. Every field ends up in the manifest: a change in any of them rebuilds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Bump whenever the code changes what gets built (corpus, template, training), so existing
# `var/models` directories are rebuilt instead of being reported "up to date".
KIT_VERSION = "1"


@dataclass(frozen=True)
class KitConfig:
    seed: int = 0
    # Tokenizer / model shape: ~0.85M parameters, 3.4 MB of float32 safetensors.
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 512
    # Pretraining: ~0.11 s per step on 2 cores (16 x 128 tokens).
    pretrain_docs: int = 20_000
    pretrain_steps: int = 250
    pretrain_batch: int = 16
    pretrain_seq_len: int = 128
    pretrain_lr: float = 3e-3
    # SFT (instruct and markdown, each from base): ~0.07 s per step, length-grouped batches.
    sft_chats: int = 400
    sft_steps: int = 200
    sft_batch: int = 16
    sft_lr: float = 1e-3
    warmup_steps: int = 20
    # Float results depend on the thread count (reduction order), so it is pinned, not "all".
    threads: int = 2
    log_every: int = 50

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
