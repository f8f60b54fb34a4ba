"""Orchestration: corpus -> tokenizer -> base -> instruct / markdown -> manifest."""

from __future__ import annotations

import copy
import fcntl
import random
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from . import corpus
from .config import DEFAULT_ARCH, KIT_VERSION, SFT_STEPS, KitConfig
from .manifest import MANIFEST_NAME, WEIGHTS_NAME, Manifest, ModelRecord, sha256_file
from .tokenizer import ENDOFTEXT, IM_END, IM_START, train_tokenizer
from .training import (
    Log,
    TrainResult,
    deterministic_torch,
    new_model,
    pretrain,
    seed_everything,
    sft,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT_DIR = REPO_ROOT / "var" / "models"
# (directory, corpus style) of the SFT variants; both start from the same base weights.
SFT_VARIANTS: list[tuple[str, corpus.Style]] = [("instruct", "plain"), ("markdown", "markdown")]
OUTPUTS = ["tokenizer", "base", *(name for name, _ in SFT_VARIANTS)]


def build_tiny_models(
    out_dir: Path,
    *,
    arch: str = DEFAULT_ARCH,
    seed: int = 0,
    force: bool = False,
    pretrain_steps: int | None = None,
    sft_steps: int | None = None,
    log: Log = print,
) -> Manifest:
    """Build tokenizer, base, instruct and markdown checkpoints of `arch` into `out_dir`.

    Skips the work ("up to date") when `out_dir` already holds a finished build of the same kit
    version and config whose weights are intact, unless `force`.
    """
    cfg = KitConfig(seed=seed, arch=arch, sft_steps=SFT_STEPS.get(arch, SFT_STEPS[DEFAULT_ARCH]))
    if pretrain_steps is not None:
        cfg = replace(cfg, pretrain_steps=pretrain_steps)
    if sft_steps is not None:
        cfg = replace(cfg, sft_steps=sft_steps)
    if cfg.pretrain_steps < 1 or cfg.sft_steps < 1:
        raise ValueError("pretrain_steps and sft_steps must be >= 1")
    out_dir = Path(out_dir)

    with _exclusive(out_dir):
        existing = Manifest.read(out_dir)
        if (
            not force
            and existing is not None
            and existing.kit_version == KIT_VERSION
            and existing.config == cfg.to_dict()
            and existing.files_intact()
        ):
            log(f"tiny models in {out_dir}: up to date ({arch}, seed {seed}, kit {KIT_VERSION})")
            return existing
        return _build_into(out_dir, cfg, log)


@contextmanager
def _exclusive(out_dir: Path) -> Iterator[None]:
    """One build per directory at a time (say `manage.py demo` while the tests run): a second
    caller waits, then finds the first one's build up to date."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


def _build_into(out_dir: Path, cfg: KitConfig, log: Log) -> Manifest:
    start = time.perf_counter()
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)  # invalid until the new build finishes
    # Build next to the target, then swap directories in: an interrupted build never leaves
    # a half-written checkpoint under a final name.
    staging = out_dir / ".building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    log(
        f"tiny models: building {cfg.arch} into {out_dir} (seed {cfg.seed}, "
        f"{cfg.pretrain_steps} pretrain + 2x{cfg.sft_steps} SFT steps)"
    )
    try:
        with deterministic_torch(cfg.threads):
            records = _build(cfg, staging, log)
        for name in OUTPUTS:
            shutil.rmtree(out_dir / name, ignore_errors=True)
            (staging / name).rename(out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    manifest = Manifest(
        kit_version=KIT_VERSION,
        seed=cfg.seed,
        config=cfg.to_dict(),
        tokenizer_sha256=sha256_file(out_dir / "tokenizer" / "tokenizer.json"),
        models=records,
        build_seconds=round(time.perf_counter() - start, 2),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        out_dir=out_dir,
        rebuilt=True,
    )
    manifest.write()
    log(f"tiny models: done in {manifest.build_seconds:.1f}s")
    return manifest


def _build(cfg: KitConfig, staging: Path, log: Log) -> dict[str, ModelRecord]:
    rng = random.Random(cfg.seed)
    docs = corpus.pretrain_documents(rng, cfg.pretrain_docs)
    convs = corpus.chats(rng, cfg.sft_chats)

    t = time.perf_counter()
    tokenizer = train_tokenizer(_tokenizer_texts(docs, convs), cfg.vocab_size, cfg.max_positions)
    tokenizer.save_pretrained(staging / "tokenizer")
    log(f"tokenizer: {len(tokenizer)} tokens ({time.perf_counter() - t:.1f}s)")

    seed_everything(cfg.seed)
    base = new_model(cfg, tokenizer)
    stream = _token_stream(tokenizer, docs)
    log(f"base: {base.num_parameters():,} parameters, pretraining on {len(stream):,} tokens")
    records = {"base": _save(base, tokenizer, staging / "base", pretrain(base, stream, cfg, log))}

    for i, (name, style) in enumerate(SFT_VARIANTS, start=1):
        seed_everything(cfg.seed + i)  # each stage seeded on its own, independent of the others
        model = copy.deepcopy(base)
        examples = _sft_examples(tokenizer, convs, style, cfg.max_positions)
        log(f"{name}: SFT on {len(examples)} chats ({style} answers)")
        result = sft(model, examples, tokenizer.pad_token_id, cfg, name, log)
        records[name] = _save(model, tokenizer, staging / name, result)
    return records


def _tokenizer_texts(docs: list[str], convs: list[list[corpus.QA | str]]) -> list[str]:
    # The tokenizer also sees the chat text (never the markers, which are special tokens) so
    # role names and markdown answers get merges of their own.
    chat_texts = [
        f"{m['role']}\n{m['content']}"
        for conv in convs
        for style in ("plain", "markdown")
        for m in corpus.to_messages(conv, style)
    ]
    return docs + chat_texts


def _token_stream(tokenizer: PreTrainedTokenizerFast, docs: list[str]) -> torch.Tensor:
    """All documents as one stream, each followed by <|endoftext|> (never a ChatML marker)."""
    eot = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    banned = {tokenizer.convert_tokens_to_ids(IM_START), tokenizer.convert_tokens_to_ids(IM_END)}
    ids: list[int] = []
    for enc in tokenizer(docs)["input_ids"]:
        ids.extend(enc)
        ids.append(eot)
    assert not banned & set(ids), "pretraining corpus must not teach the end-of-turn marker"
    return torch.tensor(ids)


def _sft_examples(
    tokenizer: PreTrainedTokenizerFast,
    convs: list[list[corpus.QA | str]],
    style: corpus.Style,
    max_len: int,
) -> list[tuple[list[int], list[int]]]:
    """(input_ids, assistant_mask) per chat, the mask coming from the template's generation block."""
    out = []
    for conv in convs:
        enc = tokenizer.apply_chat_template(
            corpus.to_messages(conv, style),
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        out.append((enc["input_ids"][:max_len], enc["assistant_masks"][:max_len]))
    return out


@contextmanager
def _quiet_progress() -> Iterator[None]:
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _save(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, path: Path, result: TrainResult
) -> ModelRecord:
    with _quiet_progress():  # a one-shard "Writing model shards" bar is noise in build logs
        model.save_pretrained(path)  # safetensors only (the v5 default)
    tokenizer.save_pretrained(path)
    weights = path / WEIGHTS_NAME
    weights.chmod(0o644)  # written via a private temp file (0600); other users may serve it
    return ModelRecord(
        path=path.name,
        sha256=sha256_file(weights),
        size_bytes=weights.stat().st_size,
        parameters=model.num_parameters(),
        steps=result.steps,
        final_loss=result.final_loss,
        train_seconds=round(result.seconds, 2),
    )
