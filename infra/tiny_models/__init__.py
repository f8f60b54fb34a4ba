"""Tiny model kit: a tokenizer and three sub-million-parameter checkpoints (a dense Llama, or a
Nemotron-H hybrid Mamba-attention mixture of experts) built locally.

`build_tiny_models(out_dir)` produces `tokenizer/`, `base/`, `instruct/`, `markdown/` and
`manifest.json`, deterministically from a seed and without any download. See README.md.
"""

from .build import DEFAULT_OUT_DIR, build_tiny_models
from .config import KIT_VERSION, KitConfig
from .manifest import Manifest, ModelRecord

__all__ = [
    "DEFAULT_OUT_DIR",
    "KIT_VERSION",
    "KitConfig",
    "Manifest",
    "ModelRecord",
    "build_tiny_models",
]
