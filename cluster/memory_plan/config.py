"""Reading a hub `config.json` that may be an agent's: bounded, JSON only, sizes checked."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1024 * 1024  # a real config.json is a few KB; multimodal ones tens of KB
MAX_LAYERS = 1024  # building on meta costs time per module, not per parameter
MAX_EXPERTS = 4096
MAX_SIZE = 1 << 22  # any width, head count or vocabulary (4M; the largest real ones are ~256K)
MAX_NESTING = 8
# The keys whose numbers are sizes: these must be non-negative integers within MAX_SIZE.
_SIZE_KEY = re.compile(r"^(num_|n_)|(_size|_dim|_heads|_layers|_experts)$")


class PlanError(ValueError):
    """A config that cannot be planned, said in words."""


def read_hub_config(path: Path) -> dict[str, Any]:
    """The JSON object of `path` (a config.json, or a folder holding one), bounded and checked."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        # No symlink at the last step, and no blocking on a FIFO: only a regular file is read.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise PlanError(f"cannot open {path}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PlanError(f"{path} is not a regular file")
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise PlanError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes: not a model config")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise PlanError(f"{path} is not JSON: {str(error)[:120]}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path} holds a JSON {type(data).__name__}, not an object")
    check_sizes(data)
    return data


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def check_sizes(data: dict[str, Any], where: str = "", depth: int = 0) -> None:
    """Refuse negative, fractional or absurd sizes, at any depth (`text_config` and the like)."""
    if depth > MAX_NESTING:
        raise PlanError(f"the config nests deeper than {MAX_NESTING} objects")
    for key, value in data.items():
        name = f"{where}{key}"
        if isinstance(value, dict):
            check_sizes(value, f"{name}.", depth + 1)
        elif _SIZE_KEY.search(key) and isinstance(value, int | float):
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(f"{name} is {value!r}: a size must be a whole number")
            if value < 0:
                raise PlanError(f"{name} is {value}: a size cannot be negative")
            limit = MAX_EXPERTS if key.endswith("experts") else MAX_SIZE
            if key in ("num_hidden_layers", "num_layers", "n_layer"):
                limit = MAX_LAYERS
            if value > limit:
                raise PlanError(f"{name} is {value}: more than {limit}, refused as absurd")
    for key in ("layers_block_type", "layer_types", "hybrid_override_pattern"):
        if isinstance(data.get(key), list | str) and len(data[key]) > MAX_LAYERS:
            raise PlanError(f"{where}{key} lists more than {MAX_LAYERS} layers")
