"""Weights compared by hash and by parameter distance; no Django here.

*Weights hash*: the scheme `agents.services.checkpoint_register` stores as
`Checkpoint.weights_sha256` — the sha256 of the concatenated sha256s of the checkpoint's
`*.safetensors` files in name order — so a reference model's hash compares with any registered
checkpoint's. An agent's checkpoint (a `SandboxPath`) is read without following links.

*Parameter distance*, over the tensors both checkpoints have with the same name and shape, read
one tensor at a time (a 30B checkpoint never sits in memory whole), accumulated in float64:

- `relative_l2 = ||W - R|| / ||R||` — the whole model as one vector;
- when the base model is known too, `gap_ratio = ||W - I|| / ||I - B||`: how far the checkpoint
  is from the instruct reference I, in units of the base→instruct distance. A model trained
  from the base on its own moves in its own direction, so its distance to I is about the
  gap or more (`gap_ratio` ≈ 1 and above); a copy of I, lightly perturbed or briefly tuned, sits
  at a small fraction of it.

A checkpoint is *too close* to a reference when `gap_ratio < GAP_RATIO_THRESHOLD` (0.1), or,
where no base is available to measure the gap, when `relative_l2 < RELATIVE_L2_THRESHOLD`
(0.01). Distances need at least `MIN_SHARED` (90 %) of the reference's parameters in matching
tensors; otherwise the models are not comparable and nothing is claimed.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cluster.sandbox_files import SandboxPath, as_sandbox_path, file_sha256, open_file, walk

GAP_RATIO_THRESHOLD = 0.1
RELATIVE_L2_THRESHOLD = 0.01
MIN_SHARED = 0.9


Checkpoint = SandboxPath | Path


def weight_files(checkpoint: Checkpoint) -> list[SandboxPath]:
    """The checkpoint's `*.safetensors` files in name order. In a sandbox (a SandboxPath) only
    regular files count and nothing is followed; a platform folder (a Path, a reference model)
    may link its files elsewhere, as a Hugging Face snapshot does, and is the platform's own."""
    if isinstance(checkpoint, Path):
        files = sorted(checkpoint.glob("*.safetensors"))
        return [as_sandbox_path(f.resolve()) for f in files if f.resolve().is_file()]
    return sorted(
        (e.where for e in walk(checkpoint) if e.is_file and e.where.parent == checkpoint
         and e.where.name.endswith(".safetensors")),
        key=lambda where: where.name,
    )  # fmt: skip


def weights_sha256(checkpoint: Checkpoint) -> str | None:
    files = weight_files(checkpoint)
    if not files:
        return None
    return hashlib.sha256("".join(file_sha256(f) for f in files).encode()).hexdigest()


@dataclass(frozen=True)
class Distance:
    relative_l2: float  # ||W - R|| / ||R||
    shared_fraction: float  # share of R's parameters compared
    tensors: int
    gap_ratio: float | None = None  # ||W - I|| / ||I - B||, when a base was given

    @property
    def comparable(self) -> bool:
        return self.shared_fraction >= MIN_SHARED

    @property
    def too_close(self) -> bool:
        if not self.comparable:
            return False
        if self.gap_ratio is not None:
            return self.gap_ratio < GAP_RATIO_THRESHOLD
        return self.relative_l2 < RELATIVE_L2_THRESHOLD

    def evidence(self) -> dict[str, object]:
        return {
            "relative_l2": _rounded(self.relative_l2),
            "gap_ratio": _rounded(self.gap_ratio),
            "shared_fraction": round(self.shared_fraction, 4),
            "tensors": self.tensors,
            "thresholds": {"gap_ratio": GAP_RATIO_THRESHOLD, "relative_l2": RELATIVE_L2_THRESHOLD},
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


class _Tensors:
    """Name -> (file, shape) over every `*.safetensors` file of a checkpoint. Each file is
    opened once, without following links, and safetensors reads it through `/proc/self/fd`:
    the very file that was checked, whatever the agent renames meanwhile."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        from safetensors import safe_open

        self.opened: list[BinaryIO] = []
        self.where: dict[str, tuple[str, tuple[int, ...]]] = {}
        for file in weight_files(checkpoint):
            handle = open_file(file)
            self.opened.append(handle)
            path = f"/proc/self/fd/{handle.fileno()}"
            with safe_open(path, framework="pt") as tensors:
                for name in tensors.keys():  # noqa: SIM118 -- safe_open is not a dict
                    self.where[name] = (path, tuple(tensors.get_slice(name).get_shape()))

    def load(self, name: str):  # -> torch.Tensor (float64)
        import torch
        from safetensors import safe_open

        with safe_open(self.where[name][0], framework="pt") as tensors:
            return tensors.get_tensor(name).to(torch.float64)

    def close(self) -> None:
        for handle in self.opened:
            handle.close()


def parameter_distance(
    checkpoint: Checkpoint, reference: Path, *, base: Path | None = None
) -> Distance:
    """How far `checkpoint` is from `reference` (and, with `base`, in base→reference gaps)."""
    opened: list[_Tensors] = []
    try:
        mine = _Tensors(checkpoint)
        opened.append(mine)
        ref = _Tensors(reference)
        opened.append(ref)
        origin = _Tensors(base) if base is not None else None
        if origin is not None:
            opened.append(origin)
        return _distance(mine, ref, origin)
    finally:
        for tensors in opened:
            tensors.close()


def _distance(mine: _Tensors, ref: _Tensors, origin: _Tensors | None) -> Distance:
    import torch

    total = sum(math.prod(shape) for _, shape in ref.where.values())
    shared = [
        name
        for name, (_, shape) in ref.where.items()
        if name in mine.where
        and mine.where[name][1] == shape
        and (origin is None or (name in origin.where and origin.where[name][1] == shape))
    ]
    diff = norm = gap = 0.0
    compared = 0
    for name in shared:
        r = ref.load(name)
        w = mine.load(name)
        diff += float(torch.sum((w - r) ** 2))
        norm += float(torch.sum(r**2))
        if origin is not None:
            gap += float(torch.sum((r - origin.load(name)) ** 2))
        compared += r.numel()
    relative = math.sqrt(diff) / math.sqrt(norm) if norm else math.inf
    gap_ratio = math.sqrt(diff) / math.sqrt(gap) if origin is not None and gap > 0 else None
    return Distance(
        relative_l2=relative,
        shared_fraction=compared / total if total else 0.0,
        tensors=len(shared),
        gap_ratio=gap_ratio,
    )
