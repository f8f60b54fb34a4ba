"""Model creation and the two plain torch training loops (pretraining and SFT)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from cluster.training.schedule import warmup_cosine

from .config import KitConfig
from .tokenizer import ENDOFTEXT

Log = Callable[[str], None]
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # input_ids, attention_mask, labels
IGNORE = -100  # label value the HF loss skips


@dataclass(frozen=True)
class TrainResult:
    steps: int
    final_loss: float  # mean of the last few steps: one step's loss is too noisy to compare
    seconds: float


@contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Pin threads and deterministic kernels for the build, then restore the caller's settings.

    The build runs inside other processes (a Django command, pytest), so global torch state is
    put back afterwards.
    """
    prev_threads = torch.get_num_threads()
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(prev_threads)
        torch.use_deterministic_algorithms(prev_det)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def new_model(cfg: KitConfig, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """A randomly initialised model of `cfg.arch`, wired to the tokenizer's special tokens."""
    bos = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    special = {
        "vocab_size": len(tokenizer),
        "bos_token_id": bos,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    attention = {
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.hidden_size // cfg.num_heads,
        "max_position_embeddings": cfg.max_positions,
    }
    model: PreTrainedModel
    if cfg.arch == "nemotron_h":
        model = NemotronHForCausalLM(
            NemotronHConfig(
                **special,
                **attention,
                layer_types=list(cfg.layer_types),
                mamba_num_heads=cfg.mamba_heads,
                mamba_head_dim=cfg.mamba_head_dim,
                ssm_state_size=cfg.ssm_state_size,
                n_groups=1,
                chunk_size=cfg.max_positions // 4,
                n_routed_experts=cfg.routed_experts,
                num_experts_per_tok=cfg.experts_per_token,
                moe_intermediate_size=cfg.expert_intermediate_size,
                n_shared_experts=1,
                moe_shared_expert_intermediate_size=cfg.expert_intermediate_size,
                intermediate_size=cfg.intermediate_size,
                layer_norm_epsilon=1e-5,
                tie_word_embeddings=False,  # as the real Nemotron-H
            )
        )
    else:
        model = LlamaForCausalLM(
            LlamaConfig(
                **special,
                **attention,
                intermediate_size=cfg.intermediate_size,
                num_hidden_layers=cfg.num_layers,
                rms_norm_eps=1e-5,
                tie_word_embeddings=True,
            )
        )
    # eos is <|im_end|> even for the base model: it *would* stop if it had learned to, which is
    # exactly the failure mode (never stopping) the base model is meant to show.
    model.generation_config = GenerationConfig(
        bos_token_id=bos, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def _train(
    model: PreTrainedModel,
    batches: Iterator[Batch],
    *,
    steps: int,
    lr: float,
    weight_decay: float,
    cfg: KitConfig,
    name: str,
    log: Log,
) -> TrainResult:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(min(cfg.warmup_steps, steps), steps)
    )
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        input_ids, attention_mask, labels = next(batches)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % cfg.log_every == 0 or step == steps:
            log(
                f"  {name} step {step}/{steps} loss {losses[-1]:.3f} "
                f"({time.perf_counter() - start:.1f}s)"
            )
    model.eval()
    tail = losses[-10:]
    return TrainResult(steps, round(sum(tail) / len(tail), 4), time.perf_counter() - start)


def pretrain(model: PreTrainedModel, stream: torch.Tensor, cfg: KitConfig, log: Log) -> TrainResult:
    """Next-token prediction on random windows of one long token stream."""
    gen = torch.Generator().manual_seed(cfg.seed)
    span = cfg.pretrain_seq_len

    def batches() -> Iterator[Batch]:
        while True:
            starts = torch.randint(0, len(stream) - span, (cfg.pretrain_batch,), generator=gen)
            x = torch.stack([stream[s : s + span] for s in starts.tolist()])
            yield x, torch.ones_like(x), x  # HF shifts labels internally

    return _train(
        model,
        batches(),
        steps=cfg.pretrain_steps,
        lr=cfg.pretrain_lr,
        weight_decay=0.1,
        cfg=cfg,
        name="pretrain",
        log=log,
    )


def sft(
    model: PreTrainedModel,
    examples: list[tuple[list[int], list[int]]],
    pad_id: int,
    cfg: KitConfig,
    name: str,
    log: Log,
) -> TrainResult:
    """Full fine-tune on (input_ids, assistant_mask) pairs; loss only where the mask is 1."""
    gen = torch.Generator().manual_seed(cfg.seed)

    def batches() -> Iterator[Batch]:
        while True:  # one epoch per loop
            for rows in _length_grouped(examples, cfg.sft_batch, gen):
                width = max(len(ids) for ids, _ in rows)
                ids = torch.full((len(rows), width), pad_id)
                att = torch.zeros((len(rows), width), dtype=torch.long)
                lab = torch.full((len(rows), width), IGNORE)
                for r, (row_ids, mask) in enumerate(rows):
                    n = len(row_ids)
                    ids[r, :n] = torch.tensor(row_ids)
                    att[r, :n] = 1
                    lab[r, :n] = torch.where(torch.tensor(mask) == 1, torch.tensor(row_ids), IGNORE)
                yield ids, att, lab

    return _train(
        model,
        batches(),
        steps=cfg.sft_steps,
        lr=cfg.sft_lr,
        weight_decay=0.0,
        cfg=cfg,
        name=name,
        log=log,
    )


def _length_grouped(
    examples: list[tuple[list[int], list[int]]], batch: int, gen: torch.Generator
) -> list[list[tuple[list[int], list[int]]]]:
    """One shuffled epoch of batches of similar length.

    Right-padding every batch to its longest chat (two-turn chats are twice as long) wastes
    about half the compute; sorting within windows of 8 batches keeps batches random enough.
    """
    order = torch.randperm(len(examples), generator=gen).tolist()
    window = batch * 8
    batches = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda j: len(examples[j][0]))
        batches.extend(chunk[i : i + batch] for i in range(0, len(chunk) - batch + 1, batch))
    return [
        [examples[j] for j in batches[k]]
        for k in torch.randperm(len(batches), generator=gen).tolist()
    ]
