"""Is a directory a checkpoint the arena can serve? Checked without loading the weights.

A checkpoint passes when it is safetensors only (no pickle: `.bin`, `.pt`, `.pkl`, `.pth`
can run code when loaded), has a config and a tokenizer with a chat template and an
end-of-turn token, and its weights match the model its config describes — every tensor the
model needs is there with the right shape, as `from_pretrained` would require. The weights
are compared by their safetensors headers against a model built on PyTorch's meta device,
so a 30B checkpoint is checked in seconds and without its memory.

The folder is the agent's: its files are read through `cluster.sandbox_files` (no link is
followed, every read is bounded), and transformers reads private copies of the settings.
"""

from __future__ import annotations

import json
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from cluster.sandbox_files import SandboxPath, UnsafePath, kind_of, open_file, read_bytes, walk

PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}
MAX_ENTRIES = 10_000  # files and folders in a checkpoint folder, all levels
MAX_SETTINGS_FILE_BYTES = 128 * 1024**2  # a large vocabulary's tokenizer.json is tens of MB
MAX_HEADER_BYTES = 100 * 1024**2  # the safetensors library's own limit


class CheckpointInvalid(ValueError):
    pass


@dataclass(frozen=True)
class CheckpointFacts:
    architecture: str
    parameters: int
    end_of_turn_token: str
    weight_files: list[str]


# transformers imports lazily; two request threads importing it for the first time at once
# can see a half-initialised module ("cannot import name 'AutoConfig'"), so one at a time.
_IMPORT_LOCK = threading.Lock()


def inspect_checkpoint(path: SandboxPath | Path) -> CheckpointFacts:
    """Check the checkpoint folder `path` (in a sandbox: nothing in it is followed or trusted).

    Its top level must hold regular files and folders only: a link (to a rival's weights, to
    a root file) is refused by name. The settings files are copied, each within
    `MAX_SETTINGS_FILE_BYTES`, into a private folder that transformers reads; the weights are
    known by their safetensors headers, read within `MAX_HEADER_BYTES`."""
    with _IMPORT_LOCK:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = path if isinstance(path, SandboxPath) else SandboxPath(path)
    try:
        entries = list(walk(folder, max_entries=MAX_ENTRIES))
    except (NotADirectoryError, FileNotFoundError):
        raise CheckpointInvalid(f"{folder} is not a directory") from None
    except UnsafePath as refused:
        raise CheckpointInvalid(str(refused)) from None
    pickles = sorted(e.where.name for e in entries if e.where.path.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointInvalid(
            f"pickle files are not accepted ({', '.join(pickles)}): save with safetensors "
            "(save_pretrained(..., safe_serialization=True))"
        )
    top = [e for e in entries if e.where.parent == folder]
    for entry in top:
        if not (entry.is_file or entry.is_folder):
            raise CheckpointInvalid(
                f"{entry.where.name} is {kind_of(entry.info.st_mode)}: a checkpoint holds "
                "regular files only"
            )
    files = {e.where.name: e for e in top if e.is_file}
    if "config.json" not in files:
        raise CheckpointInvalid("no config.json")
    weights = sorted(name for name in files if name.endswith(".safetensors"))
    if not weights:
        raise CheckpointInvalid("no *.safetensors weights")
    with tempfile.TemporaryDirectory(prefix="checkpoint-settings-") as private:
        settings = Path(private)
        for name, entry in files.items():
            if name in weights or entry.info.st_size > MAX_SETTINGS_FILE_BYTES:
                continue  # not needed to load the settings; too large ones are not copied
            try:
                (settings / name).write_bytes(
                    read_bytes(entry.where, max_bytes=MAX_SETTINGS_FILE_BYTES)
                )
            except OSError as exc:  # changed since the listing: a link now, say
                raise CheckpointInvalid(str(exc)) from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(settings, local_files_only=True)
        except Exception as exc:  # transformers raises many kinds
            raise CheckpointInvalid(f"the tokenizer does not load: {exc}") from None
        if not getattr(tokenizer, "chat_template", None):
            raise CheckpointInvalid("the tokenizer has no chat template")
        end_of_turn = _end_of_turn(settings, tokenizer)
        config = AutoConfig.from_pretrained(settings, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    found: dict[str, tuple[int, ...]] = {}
    for name in weights:
        found.update(safetensors_shapes(folder / name))
    tied = getattr(config, "tie_word_embeddings", False)
    missing = [n for n in expected if n not in found and not (tied and n == "lm_head.weight")]
    if missing:
        raise CheckpointInvalid(
            f"weights are missing for {len(missing)} tensors, e.g. {missing[0]}"
        )
    wrong = [n for n in expected if n in found and found[n] != expected[n]]
    if wrong:
        name = wrong[0]
        raise CheckpointInvalid(
            f"{name} has shape {found[name]}, the config needs {expected[name]}"
        )
    return CheckpointFacts(
        architecture=type(model).__name__,
        parameters=sum(p.numel() for p in model.parameters()),
        end_of_turn_token=end_of_turn,
        weight_files=weights,
    )


def safetensors_shapes(where: SandboxPath) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from the file's header alone: an 8-byte little-endian length, then
    that many bytes of JSON. Read without following a link and within MAX_HEADER_BYTES."""
    try:
        with open_file(where) as weights:
            length = int.from_bytes(weights.read(8), "little")
            if length > MAX_HEADER_BYTES:
                raise CheckpointInvalid(f"{where.name}: a header of {length} bytes is too large")
            header = json.loads(weights.read(length))
    except OSError as exc:
        raise CheckpointInvalid(str(exc)) from None
    except ValueError:
        raise CheckpointInvalid(f"{where.name} is not a safetensors file") from None
    if not isinstance(header, dict):
        raise CheckpointInvalid(f"{where.name} is not a safetensors file")
    shapes = {}
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise CheckpointInvalid(f"{where.name}: tensor {name} has no valid shape")
        shapes[name] = tuple(shape)
    return shapes


def _end_of_turn(path: Path, tokenizer: object) -> str:
    """The token that ends the assistant's turn: generation_config's eos, else the tokenizer's."""
    ids: list[int] = []
    generation = path / "generation_config.json"
    if generation.is_file():
        eos = json.loads(generation.read_text()).get("eos_token_id")
        ids = eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else []
    tokens = [tokenizer.convert_ids_to_tokens(i) for i in ids] or [
        getattr(tokenizer, "eos_token", None)
    ]  # type: ignore[attr-defined]
    tokens = [t for t in tokens if t]
    if not tokens:
        raise CheckpointInvalid("no end-of-turn token (set eos_token_id in generation_config.json)")
    return tokens[0]
