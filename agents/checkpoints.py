"""Is a directory a checkpoint the arena can serve? Checked without loading the weights.

A checkpoint passes when it is safetensors only (no pickle: `.bin`, `.pt`, `.pkl`, `.pth`
can run code when loaded), has a config and a tokenizer with a chat template and an
end-of-turn token, and its weights match the model its config describes — every tensor the
model needs is there with the right shape, as `from_pretrained` would require. The weights
are compared by their safetensors headers against a model built on PyTorch's meta device,
so a 30B checkpoint is checked in seconds and without its memory.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


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


def inspect_checkpoint(path: Path) -> CheckpointFacts:
    with _IMPORT_LOCK:
        import torch
        from safetensors import safe_open
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not path.is_dir():
        raise CheckpointInvalid(f"{path} is not a directory")
    pickles = sorted(p.name for p in path.rglob("*") if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointInvalid(
            f"pickle files are not accepted ({', '.join(pickles)}): save with safetensors "
            "(save_pretrained(..., safe_serialization=True))"
        )
    if not (path / "config.json").is_file():
        raise CheckpointInvalid("no config.json")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise CheckpointInvalid("no *.safetensors weights")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers raises many kinds
        raise CheckpointInvalid(f"the tokenizer does not load: {exc}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise CheckpointInvalid("the tokenizer has no chat template")
    end_of_turn = _end_of_turn(path, tokenizer)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    found: dict[str, tuple[int, ...]] = {}
    for file in weights:
        with safe_open(str(file), framework="pt") as tensors:
            for name in tensors.keys():  # noqa: SIM118 -- safe_open is not a dict
                found[name] = tuple(tensors.get_slice(name).get_shape())
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
        weight_files=[w.name for w in weights],
    )


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
