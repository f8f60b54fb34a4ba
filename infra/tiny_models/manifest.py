"""`manifest.json`: what was built, from which config, with which result."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
WEIGHTS_NAME = "model.safetensors"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class ModelRecord:
    path: str  # directory name, relative to the manifest
    sha256: str  # of model.safetensors
    size_bytes: int
    parameters: int
    steps: int
    final_loss: float
    train_seconds: float


@dataclass
class Manifest:
    kit_version: str
    seed: int
    config: dict[str, Any]
    tokenizer_sha256: str  # of tokenizer/tokenizer.json
    models: dict[str, ModelRecord]
    build_seconds: float
    torch_version: str
    transformers_version: str
    # Not written to disk: where it was loaded from, and whether this call built it.
    out_dir: Path = field(default=Path("."), compare=False)
    rebuilt: bool = field(default=False, compare=False)

    @property
    def arch(self) -> str:
        """The architecture built ("nemotron_h", "llama"); kits before version 2 built Llama."""
        return str(self.config.get("arch", "llama"))

    def model_dir(self, name: str) -> Path:
        """Absolute checkpoint directory of `name` ("base", "instruct", "markdown")."""
        return (self.out_dir / self.models[name].path).resolve()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["out_dir"], d["rebuilt"]
        return d

    def write(self) -> None:
        # Written last and atomically: a manifest on disk means the build finished.
        path = self.out_dir / MANIFEST_NAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def read(cls, out_dir: Path) -> Manifest | None:
        """The manifest in `out_dir`, or None if missing or unreadable (then: rebuild)."""
        try:
            d = json.loads((out_dir / MANIFEST_NAME).read_text())
            d["models"] = {k: ModelRecord(**v) for k, v in d["models"].items()}
            return cls(**d, out_dir=out_dir)
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def files_intact(self) -> bool:
        """All checkpoints still present with the recorded weights."""
        for rec in self.models.values():
            weights = self.out_dir / rec.path / WEIGHTS_NAME
            if not weights.is_file() or sha256_file(weights) != rec.sha256:
                return False
        return True
