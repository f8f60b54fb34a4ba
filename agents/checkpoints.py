"""Is a directory a checkpoint the arena can serve? Checked without loading the weights, in
bounded time and memory whatever its files claim.

A checkpoint passes when it is safetensors only (no pickle: `.bin`, `.pt`, `.pkl`, `.pth`
can run code when loaded), has a config and a tokenizer with a chat template and an
end-of-turn token, and its weights match the model its config describes — every tensor the
model needs is there with the right shape, as `from_pretrained` would require.

Everything in the folder is the agent's text, so the checks go from cheap to costly, and each
bounds the next:
1. The files: read through `cluster.sandbox_files` (no link followed, every read bounded);
   the settings within their sizes.
2. `config.json`, parsed here (`agents.checkpoint_config`): its dimensions whole numbers
   within bounds, heads that divide the width, no more experts per token than experts, and
   the parameters they imply, in all and per token (a mixture of experts: Nemotron-H,
   Mixtral- or Qwen-MoE-style), under `AGENTS_CHECKPOINT_MAX_PARAMETERS`.
3. The weights, known by their safetensors headers (read here, within `MAX_HEADER_BYTES`):
   well-formed, their data inside the file, as many layers and routed experts as the config
   says, and no more parameters than the maximum — so a config of a million layers (or
   experts) over weights of four is refused before anything is built.
4. Only then transformers, in a child process (`agents.checkpoint_probe`) under a timeout and
   an address-space limit: it loads the tokenizer and the config from a private copy of the
   settings and builds the model on PyTorch's meta device; its tensor shapes are compared
   with the headers here, read in the model's own layout (`as_loaded`: transformers 5 saves
   Nemotron-H's experts one tensor each and converts them on loading). The site process never
   builds a model.
Every refusal is a `CheckpointInvalid` saying what to fix. The facts returned give the
parameters as transformers counts them and those a token goes through (`active_parameters`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.checkpoint_config import (
    ConfigInvalid,
    ParameterCount,
    config_dimensions,
    config_parameters,
)
from cluster.sandbox_files import SandboxPath, is_sparse, kind_of, open_file, read_bytes, walk

PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}
MAX_ENTRIES = 10_000  # files and folders in a checkpoint folder, all levels
MAX_SETTINGS_FILE_BYTES = 128 * 1024**2  # a large vocabulary's tokenizer.json is tens of MB
MAX_CONFIG_BYTES = 1024**2  # config.json and generation_config.json are a few kB
MIN_FREE_BYTES = 1024**3  # left free where the platform copies agents' files
MAX_HEADER_BYTES = 100 * 1024**2  # the safetensors library's own limit
MAX_TENSORS = 200_000
# Loaded by transformers (in the probe): each within MAX_SETTINGS_FILE_BYTES or refused.
SETTINGS_FILES = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model",
}  # fmt: skip
SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip

# A layer's index in a tensor's name: model.layers.3.mlp…, transformer.h.3.attn…
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|layer)\.(\d+)\.")
# Architectures whose model keeps an lm_head of its own even where the config says
# tie_word_embeddings (transformers 5.24's `_tied_weights_keys` is empty for them).
NEVER_TIED = {"nemotron_h"}
# The config may describe somewhat more than a rough count of the weights (architectures differ
# in what the estimate leaves out); not this many times more.
IMPLIED_OVER_WEIGHTS = 4


class CheckpointInvalid(ValueError):
    pass


@dataclass(frozen=True)
class CheckpointFacts:
    architecture: str
    parameters: int  # as transformers counts them
    active_parameters: int  # per token: a mixture of experts' skipped experts left out
    end_of_turn_token: str
    weight_files: list[str]


def inspect_checkpoint(path: SandboxPath | Path) -> CheckpointFacts:
    """Check the checkpoint folder `path` (in a sandbox: nothing in it is followed or trusted).

    Its top level must hold regular files and folders only: a link (to a rival's weights, to
    a root file) is refused by name."""
    folder = path if isinstance(path, SandboxPath) else SandboxPath(path)
    try:
        entries = list(walk(folder, max_entries=MAX_ENTRIES))
    except (NotADirectoryError, FileNotFoundError):
        raise CheckpointInvalid(f"{folder} is not a directory") from None
    except OSError as refused:  # UnsafePath: a link or a FIFO on the way, too many files
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
    for name in SETTINGS_FILES & files.keys():
        bound = MAX_CONFIG_BYTES if name.endswith("config.json") else MAX_SETTINGS_FILE_BYTES
        if files[name].info.st_size > bound:
            raise CheckpointInvalid(f"{name} is larger than {bound} bytes")

    config = json_object(folder / "config.json")
    # A model's config may nest its parts' (a text_config beside a vision_config): each checked.
    sections = [config] + [part for part in config.values() if isinstance(part, dict)]
    if not isinstance(config.get("model_type"), str):
        raise CheckpointInvalid("config.json has no model_type")
    try:
        dimensions = [config_dimensions(section) for section in sections]
        count = config_parameters(config)
    except ConfigInvalid as refused:
        raise CheckpointInvalid(str(refused)) from None
    maximum = settings.AGENTS_CHECKPOINT_MAX_PARAMETERS
    if count is not None and count.total > maximum:
        raise CheckpointInvalid(
            f"config.json describes a model of {_about(count)}{count.total:,} parameters, more "
            f"than the {maximum:,} allowed"
        )
    found: dict[str, tuple[int, ...]] = {}
    for name in weights:
        found.update(safetensors_shapes(folder / name))
        if len(found) > MAX_TENSORS:
            raise CheckpointInvalid(f"the weights hold more than {MAX_TENSORS} tensors")
    held = sum(math.prod(shape) for shape in found.values())
    if held > maximum:
        raise CheckpointInvalid(
            f"the weights hold {held:,} parameters, more than the {maximum:,} allowed"
        )
    layers = max(
        [d["layers"] for d in dimensions if "layers" in d] + [count.layers if count else 0]
    )
    _layers_match(layers, found)
    experts = max(
        [d["experts"] for d in dimensions if "experts" in d] + [count.experts if count else 0]
    )
    _experts_match(experts, found)
    if count is not None and count.total > IMPLIED_OVER_WEIGHTS * held + 1_000_000:
        raise CheckpointInvalid(
            f"config.json describes a model of {_about(count)}{count.total:,} parameters; the "
            f"weights hold {held:,}"
        )
    vocab = next((d["vocab"] for d in dimensions if "vocab" in d), None)
    end_of_turn_ids = _end_of_turn_ids(folder, files, vocab)

    # Only the settings files the probe loads are copied (each bounded above, never a sparse
    # one): anything else at the top level is the agent's business, not root's /tmp's.
    settings_files = sorted(SETTINGS_FILES & files.keys())
    for name in settings_files:
        if is_sparse(files[name].info):
            raise CheckpointInvalid(f"{name} is a sparse file: write it out in full")
    needed = sum(files[name].info.st_size for name in settings_files)
    scratch = tempfile.gettempdir()
    if shutil.disk_usage(scratch).free < needed + MIN_FREE_BYTES:
        raise CheckpointInvalid(
            f"the platform has no room to check the settings files now ({scratch} is full); "
            "try again later"
        )
    with tempfile.TemporaryDirectory(prefix="checkpoint-settings-") as private:
        for name in settings_files:
            try:
                content = read_bytes(
                    files[name].where, max_bytes=MAX_SETTINGS_FILE_BYTES, dense=True
                )
            except OSError as exc:  # changed since the listing: a link now, say
                raise CheckpointInvalid(str(exc)) from None
            (Path(private) / name).write_bytes(content)
        built = _probe(Path(private), end_of_turn_ids)

    expected = {name: tuple(shape) for name, shape in built["shapes"].items()}
    found = as_loaded(found, expected)
    # A tied head needs no weights of its own, where the model really ties it: Nemotron-H
    # (transformers 5) never does, whatever its config says, and would load a random head.
    tied = built["tie_word_embeddings"] and config.get("model_type") not in NEVER_TIED
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
    parameters = built["parameters"]
    # The routed experts a token skips, from the config's arithmetic (checked against the
    # weights above): the rest is what each token goes through.
    skipped = count.total - count.active if count is not None else 0
    return CheckpointFacts(
        architecture=built["architecture"],
        parameters=parameters,
        active_parameters=max(parameters - skipped, 0),
        end_of_turn_token=built["end_of_turn_token"],
        weight_files=weights,
    )


def json_object(where: SandboxPath) -> dict:
    """A settings file's JSON object, read within MAX_CONFIG_BYTES."""
    try:
        data = json.loads(read_bytes(where, max_bytes=MAX_CONFIG_BYTES))
    except OSError as exc:
        raise CheckpointInvalid(str(exc)) from None
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        raise CheckpointInvalid(f"{where.name} is not valid JSON") from None
    if not isinstance(data, dict):
        raise CheckpointInvalid(f"{where.name} must hold a JSON object")
    return data


def _layers_match(layers: int, found: dict[str, tuple[int, ...]]) -> None:
    """No more layers in the config than the weights hold: a model of a million layers over
    weights of four is refused here, before anything is built. (Nemotron-H's layers are its
    list of block kinds.)"""
    indices = {_number(m.group(1)) for name in found if (m := LAYER_INDEX.search(name))}
    if indices and layers > len(indices):
        raise CheckpointInvalid(
            f"config.json describes {layers} layers; the weights hold {len(indices)}"
        )


def _experts_match(experts: int, found: dict[str, tuple[int, ...]]) -> None:
    """No more routed experts per MoE layer in the config than the weights hold, in either
    layout: fused (`…experts.up_proj`, its first dimension the experts) or one tensor per
    expert (`…experts.7.up_proj.weight`)."""
    held: dict[str, set[str]] = {}
    fused = 0
    for name, shape in found.items():
        head, sep, tail = name.rpartition(".experts.")
        if not sep:
            continue
        index, dot, rest = tail.partition(".")
        if dot and index.isdigit():
            held.setdefault(f"{head}\0{rest}", set()).add(_number(index))
        elif not dot and len(shape) == 3:
            fused = max(fused, shape[0])
    most = max([fused] + [len(indices) for indices in held.values()])
    if most and experts > most:
        raise CheckpointInvalid(
            f"config.json describes {experts} routed experts per MoE layer; the weights hold {most}"
        )


def as_loaded(
    found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """The weights' names and shapes as the model holds them once transformers has loaded
    them. transformers 5 saves some architectures in their original layout and converts them
    on loading: Nemotron-H's `backbone.` is the model's `model.`, and each expert's matrices,
    saved apart (`…experts.3.up_proj.weight`, (I, H)), are one fused parameter
    (`…experts.up_proj`, (E, I, H)); Mixtral- and Qwen-MoE-style experts' `gate_proj` and
    `up_proj` are one `gate_up_proj` (E, 2I, H). A name is converted only into one the model
    has (`expected`) and only when every expert 0..E-1 is there with one shape; anything else
    stays as it is, to be found missing or unexpected."""
    renamed: dict[str, tuple[int, ...]] = {}
    per_expert: dict[tuple[str, str], dict[int, tuple[int, ...]]] = {}
    backbone = any(n.startswith("model.") for n in expected) and not any(
        n.startswith("backbone.") for n in expected
    )
    for original, shape in found.items():
        name = original
        if backbone and name.startswith("backbone."):
            name = "model." + name.removeprefix("backbone.")
        head, sep, tail = name.rpartition(".experts.")
        index, _, rest = tail.partition(".")
        projection = rest.removesuffix(".weight")
        if (
            sep
            and name not in expected
            and index.isdigit()
            and len(index) <= 6
            and rest.endswith(".weight")
            and "." not in projection
        ):
            per_expert.setdefault((head, projection), {})[int(index)] = shape
        else:
            renamed[name] = shape
    stacked: dict[tuple[str, str], tuple[int, ...]] = {}
    for (head, projection), members in per_expert.items():
        shapes = set(members.values())
        if len(shapes) == 1 and sorted(members) == list(range(len(members))):
            stacked[(head, projection)] = (len(members), *shapes.pop())
        else:
            renamed.update(
                {f"{head}.experts.{i}.{projection}.weight": s for i, s in members.items()}
            )
    for (head, projection), shape in stacked.items():
        fused, merged = f"{head}.experts.{projection}", f"{head}.experts.gate_up_proj"
        if fused in expected:
            renamed[fused] = shape
        elif (
            projection in {"gate_proj", "up_proj"}
            and merged in expected
            and stacked.get((head, "gate_proj")) == stacked.get((head, "up_proj"))
        ):
            if projection == "gate_proj":  # (E, I, H) twice: (E, 2I, H), gate first
                renamed[merged] = (shape[0], 2 * shape[1], *shape[2:])
        else:
            renamed.update(
                {f"{head}.experts.{i}.{projection}.weight": shape[1:] for i in range(shape[0])}
            )
    return renamed


def _number(digits: str) -> str:
    """A layer's or expert's index as written, without leading zeros (never int(): a name
    may hold a number of a million digits)."""
    return digits.lstrip("0") or "0"


def _about(count: ParameterCount) -> str:
    return "" if count.exact else "about "


def _end_of_turn_ids(
    folder: SandboxPath, files: Mapping[str, object], vocab: int | None
) -> list[int]:
    """generation_config.json's eos_token_id (one id or a list), each a token of the vocabulary;
    none when there is no such file or field (the tokenizer's eos is used)."""
    if "generation_config.json" not in files:
        return []
    eos = json_object(folder / "generation_config.json").get("eos_token_id")
    ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    limit = vocab or 1 << 23
    if len(ids) > 64 or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < limit for i in ids
    ):
        raise CheckpointInvalid(
            f"generation_config.json: eos_token_id must be token ids from 0 to {limit - 1}"
        )
    return ids


def _probe(folder: Path, end_of_turn_ids: list[int]) -> dict:
    """transformers' view of the settings in `folder`, from a bounded child process."""
    memory = settings.AGENTS_CHECKPOINT_PROBE_MEMORY_MIB * 1024**2
    timeout = settings.AGENTS_CHECKPOINT_PROBE_TIMEOUT_S

    environment = {
        key: value
        for key, value in os.environ.items()
        if key in {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "VIRTUAL_ENV"}
    }
    environment.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agents.checkpoint_probe", str(folder),
             json.dumps(end_of_turn_ids), str(memory)],
            cwd=Path(__file__).resolve().parent.parent, env=environment, capture_output=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CheckpointInvalid(
            f"loading the config and tokenizer took longer than {timeout} s"
        ) from None
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        built = json.loads(lines[-1]) if lines else None
    except ValueError:
        built = None
    if not isinstance(built, dict):
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
        raise CheckpointInvalid(
            f"loading the config and tokenizer failed (within {memory // 1024**2} MiB): {why[0]}"
        )
    if "error" in built:
        raise CheckpointInvalid(str(built["error"])[:2000])
    return built


def safetensors_shapes(where: SandboxPath) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from the file's header alone: an 8-byte little-endian length, then
    that many bytes of JSON. Read without following a link and within MAX_HEADER_BYTES; each
    tensor's dtype known, its shape whole numbers, its data inside the file and of its size."""
    try:
        with open_file(where) as weights:
            size = os.fstat(weights.fileno()).st_size
            length = int.from_bytes(weights.read(8), "little")
            if size < 8 or length > min(MAX_HEADER_BYTES, size - 8):
                raise CheckpointInvalid(f"{where.name} is not a safetensors file (its header)")
            text = weights.read(length)
    except OSError as exc:
        raise CheckpointInvalid(str(exc)) from None
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        raise CheckpointInvalid(f"{where.name} is not a safetensors file") from None
    if not isinstance(header, dict):
        raise CheckpointInvalid(f"{where.name} is not a safetensors file")
    data = size - 8 - length
    shapes = {}
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        tensor = tensor if isinstance(tensor, dict) else {}
        shape, dtype, offsets = tensor.get("shape"), tensor.get("dtype"), tensor.get("data_offsets")
        if not isinstance(shape, list) or not all(_whole(d) for d in shape):
            raise CheckpointInvalid(f"{where.name}: tensor {name} has no valid shape")
        if dtype not in SAFETENSORS_DTYPES:
            raise CheckpointInvalid(f"{where.name}: tensor {name} has no known dtype")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_whole(o) for o in offsets)
            or not offsets[0] <= offsets[1] <= data
            or offsets[1] - offsets[0] != math.prod(shape) * SAFETENSORS_DTYPES[dtype]
        ):
            raise CheckpointInvalid(
                f"{where.name}: tensor {name}'s data is not where its header says"
            )
        shapes[name] = tuple(shape)
    return shapes


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
