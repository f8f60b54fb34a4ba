"""Weights compared by hash and by parameter distance; no Django here.

*Weights hash*: the scheme `agents.services.checkpoint_register` stores as
`Checkpoint.weights_sha256` — the sha256 of the concatenated sha256s of the checkpoint's
`*.safetensors` files in name order — so a reference model's hash compares with any registered
checkpoint's. An agent's checkpoint (a `SandboxPath`) is read without following links.

*Parameter distance*, over the tensors both checkpoints have with the same name and shape, read
one tensor at a time (a 30B checkpoint never sits in memory whole), accumulated in float64.
Every tensor counts, whatever its name: embeddings, attention, Mamba's projections, convolution
and state parameters, a mixture of experts' router, shared experts and each routed expert. The
names are those of either layout transformers writes (`comparison_units`): a fused expert
tensor (E, out, in) is compared expert by expert, each read alone, against the same expert
saved as a tensor of its own, and Nemotron-H's `backbone.` is its loaded `model.`.

- `relative_l2 = ||W - R|| / ||R||` — the whole model as one vector;
- when the base model is known too, `gap_ratio = ||W - I|| / ||I - B||`: how far the checkpoint
  is from the instruct reference I, in units of the base→instruct distance. A model trained
  from the base on its own moves in its own direction, so its distance to I is about the
  gap or more (`gap_ratio` ≈ 1 and above); a copy of I, lightly perturbed or briefly tuned, sits
  at a small fraction of it.

With the base known, `same_as_base` says the checkpoint is the base value for value, in every
tensor and every expert, whatever its files' bytes (re-saved, re-sharded, another layout).

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
    base_relative_l2: float | None = None  # ||W - B|| / ||B||, when a base was given
    # Every tensor (every expert) the base's, value for value, whatever the files' layout.
    same_as_base: bool = False

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
            "base_relative_l2": _rounded(self.base_relative_l2),
            "shared_fraction": round(self.shared_fraction, 4),
            "tensors": self.tensors,
            "thresholds": {"gap_ratio": GAP_RATIO_THRESHOLD, "relative_l2": RELATIVE_L2_THRESHOLD},
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


# A fused expert tensor is compared one expert at a time, as many as this; beyond, whole.
MAX_EXPERTS_SPLIT = 1 << 12
MAX_UNITS = 1_000_000  # compared units (tensors, experts) of one checkpoint


def comparison_units(name: str, shape: tuple[int, ...]) -> list[tuple[str, int | None]]:
    """The units tensor `name` is compared in, each named as both layouts of a checkpoint
    would name it, with its index in the tensor (None: the whole tensor). transformers 5 saves
    Nemotron-H in its original layout (`backbone.`, one tensor per expert:
    `backbone.layers.1.mixer.experts.3.up_proj.weight`, (I, H)) and holds it loaded in its own
    (`model.`, the experts fused: `model.layers.1.mixer.experts.up_proj`, (E, I, H)); an agent
    may save either. So `backbone.` reads `model.`, and a fused tensor is one unit per expert,
    under the name the other layout gives that expert: a re-saved copy compares tensor for
    tensor, and a change to one expert shows in that expert."""
    if name.startswith("backbone."):
        name = "model." + name.removeprefix("backbone.")
    head, sep, projection = name.rpartition(".experts.")
    if (
        sep
        and projection
        and "." not in projection
        and len(shape) == 3
        and 1 <= shape[0] <= MAX_EXPERTS_SPLIT
    ):
        return [(f"{head}.experts.{i}.{projection}.weight", i) for i in range(shape[0])]
    return [(name, None)]


class _Tensors:
    """Unit -> (file, tensor, index in it, shape) over every `*.safetensors` file of a
    checkpoint (`comparison_units`). Each file is opened once, without following links, and
    safetensors reads it through `/proc/self/fd`: the very file that was checked, whatever the
    agent renames meanwhile. One unit is loaded at a time (one expert of a fused tensor is
    read alone)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        from safetensors import safe_open

        self.opened: list[BinaryIO] = []
        self.where: dict[str, tuple[str, str, int | None, tuple[int, ...]]] = {}
        try:
            for file in weight_files(checkpoint):
                handle = open_file(file)
                self.opened.append(handle)
                path = f"/proc/self/fd/{handle.fileno()}"
                with safe_open(path, framework="pt") as tensors:
                    for name in tensors.keys():  # noqa: SIM118 -- safe_open is not a dict
                        shape = tuple(tensors.get_slice(name).get_shape())
                        for unit, index in comparison_units(name, shape):
                            part = shape if index is None else shape[1:]
                            self.where[unit] = (path, name, index, part)
                        if len(self.where) > MAX_UNITS:
                            raise ValueError(f"more than {MAX_UNITS} tensors to compare")
        except BaseException:
            self.close()
            raise

    def shape(self, unit: str) -> tuple[int, ...]:
        return self.where[unit][3]

    def load(self, unit: str):  # -> torch.Tensor (float64)
        import torch
        from safetensors import safe_open

        path, name, index, _ = self.where[unit]
        with safe_open(path, framework="pt") as tensors:
            if index is None:
                return tensors.get_tensor(name).to(torch.float64)
            return tensors.get_slice(name)[index : index + 1][0].to(torch.float64)

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

    total = sum(math.prod(ref.shape(unit)) for unit in ref.where)
    shared = [
        unit
        for unit in ref.where
        if unit in mine.where
        and mine.shape(unit) == ref.shape(unit)
        and (origin is None or (unit in origin.where and origin.shape(unit) == ref.shape(unit)))
    ]
    diff = norm = gap = to_base = base_norm = 0.0
    compared = 0
    for unit in shared:
        r = ref.load(unit)
        w = mine.load(unit)
        diff += float(torch.sum((w - r) ** 2))
        norm += float(torch.sum(r**2))
        if origin is not None:
            b = origin.load(unit)
            gap += float(torch.sum((r - b) ** 2))
            to_base += float(torch.sum((w - b) ** 2))
            base_norm += float(torch.sum(b**2))
        compared += r.numel()
    relative = math.sqrt(diff) / math.sqrt(norm) if norm else math.inf
    gap_ratio = math.sqrt(diff) / math.sqrt(gap) if origin is not None and gap > 0 else None
    # Every unit of the checkpoint and of the base compared, and not one value apart.
    same_units = origin is not None and set(mine.where) == set(origin.where) == set(shared)
    return Distance(
        relative_l2=relative,
        shared_fraction=compared / total if total else 0.0,
        tensors=len(shared),
        gap_ratio=gap_ratio,
        base_relative_l2=(
            math.sqrt(to_base) / math.sqrt(base_norm) if origin is not None and base_norm else None
        ),
        same_as_base=same_units and bool(shared) and to_base == 0.0,
    )
