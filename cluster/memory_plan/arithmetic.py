"""The arithmetic: bytes per GPU of each way to train or serve a census's model."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.memory_plan.census import Census
from cluster.memory_plan.config import PlanError

GIB = 1024**3


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of each copy training keeps, and per tensor of AdamW's step count."""

    name: str
    compute: int  # the weights forward and backward use (bf16: 2)
    master: int  # the fp32 copy the optimizer updates when compute is narrower (else 0)
    moments: int = 8  # AdamW's exp_avg and exp_avg_sq, fp32 each
    step: int = 4  # torch's AdamW keeps `step` as a float32 scalar tensor per parameter tensor

    @property
    def full_weight(self) -> int:
        """The dtype of the copy a sharded FSDP2 parameter lives in: the master when there is one."""
        return self.master or self.compute


# Mixed precision as the GPU runs use it: bf16 compute, fp32 master and moments (16 B/param).
BF16_MIXED = Precision("bf16 mixed precision, AdamW", compute=2, master=4)
# Everything fp32 (the CPU runs and the exact test): 4 weights + 4 grads + 8 moments.
FP32 = Precision("fp32, AdamW", compute=4, master=0)
PRECISIONS = {"bf16-mixed": BF16_MIXED, "fp32": FP32}


@dataclass(frozen=True)
class PlanOptions:
    gpus: int = 8
    gpu_memory_gib: float = 80.0
    precision: Precision = BF16_MIXED
    micro_batch: int = 1  # sequences per GPU per step
    seq_len: int = 4096  # tokens per training sequence, and each served sequence's length
    lora_rank: int = 16
    max_num_seqs: int = 256  # sequences vLLM serves at once
    tensor_parallel: int = 1  # vLLM's --tensor-parallel-size (the platform's default: 1)
    gpu_memory_utilization: float = 0.9  # vLLM's default: the share of a GPU it may take
    # CUDA context (~0.5 GiB), NCCL buffers and the caching allocator's slack; for vLLM, its
    # CUDA graphs and the profiling pass. A stated allowance, not a measurement.
    overhead_gib: float = 2.0

    def __post_init__(self) -> None:
        for name in ("gpus", "micro_batch", "seq_len", "lora_rank", "max_num_seqs"):
            value = getattr(self, name)
            if not 1 <= value <= 1 << 24:
                raise PlanError(f"{name.replace('_', '-')} must be between 1 and {1 << 24}")
        if not 1 <= self.tensor_parallel <= self.gpus:
            raise PlanError("the tensor-parallel size must be between 1 and the GPUs")
        if not 0 < self.gpu_memory_gib <= 100_000 or not 0 <= self.overhead_gib < 100_000:
            raise PlanError("GPU memory must be positive (GiB)")


@dataclass(frozen=True)
class StrategyMemory:
    """Bytes per GPU of one way to train or serve the model."""

    strategy: str
    weights: int
    grads: int
    optimizer: int  # fp32 master and AdamW moments (and the step counters)
    gathered: int  # transient: unsharded units during forward and backward
    activations: int
    cache: int  # serving: KV cache and Mamba state for the sequences in flight
    overhead: int
    budget: int  # what this strategy may use of one GPU
    note: str

    @property
    def static(self) -> int:
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.static + self.gathered + self.activations + self.cache + self.overhead

    @property
    def fits(self) -> bool:
        return self.total <= self.budget


@dataclass(frozen=True)
class MemoryPlan:
    census: Census
    options: PlanOptions
    strategies: tuple[StrategyMemory, ...]
    sequences_that_fit: int  # vLLM: sequences of seq_len one replica holds at once

    def strategy(self, prefix: str) -> StrategyMemory:
        return next(s for s in self.strategies if s.strategy.startswith(prefix))


def _share(value: int, gpus: int) -> int:
    return math.ceil(value / gpus)


def activation_bytes(c: Census, o: PlanOptions) -> int:
    """With activation checkpointing per block (HF `gradient_checkpointing_enable`):
    - each block's input is kept: layers x tokens x hidden in the compute dtype;
    - one block at a time is recomputed in backward: its activations (`block_token_width`)
      and as much again for their gradients;
    - the logits: tokens x vocab in the compute dtype, the fp32 copy the cross-entropy upcasts
      to, and its fp32 gradient (4 + 4). For a 131K vocabulary this is the largest term."""
    tokens = o.micro_batch * o.seq_len
    a = o.precision.compute
    kept = c.layers * tokens * c.hidden_size * a
    recomputed = 2 * tokens * c.block_token_width * a
    logits = tokens * c.vocab_size * (a + 4 + 4)
    return kept + recomputed + logits


def memory_plan(c: Census, o: PlanOptions) -> MemoryPlan:
    p, n, P = o.precision, o.gpus, c.total
    budget = int(o.gpu_memory_gib * GIB)
    overhead = int(o.overhead_gib * GIB)
    act = activation_bytes(c, o)
    optimizer = p.master * P + p.moments * P + p.step * c.tensors
    # FSDP2 (fully_shard per block, then the root) gathers one unit and prefetches the next, in
    # the compute dtype, and holds the unit's unsharded gradient until it is reduce-scattered.
    fsdp_unit = max(c.largest_block, c.root)
    fsdp = StrategyMemory(
        "full SFT, FSDP2",
        # The sharded parameter is the fp32 master itself (sft_fsdp2 loads fp32, MixedPrecision
        # casts to bf16 only what it gathers), and its gradient is sharded in the same dtype.
        weights=_share(p.full_weight * P, n),
        grads=_share(p.full_weight * P, n),
        optimizer=_share(p.moments * P + p.step * c.tensors, n),
        gathered=fsdp_unit * (2 * p.compute + p.full_weight),
        activations=act, cache=0, overhead=overhead, budget=budget,
        note="weights, gradients and AdamW states all sharded over the GPUs",
    )  # fmt: skip
    # ZeRO-2: every GPU keeps the whole compute-dtype model; gradients (reduced in buckets into
    # their owner's partition) and the optimizer's master and moments are partitioned.
    zero2 = StrategyMemory(
        "full SFT, ZeRO-2",
        weights=p.compute * P, grads=_share(p.compute * P, n), optimizer=_share(optimizer, n),
        gathered=0, activations=act, cache=0, overhead=overhead, budget=budget,
        note="full weights on every GPU; gradients and optimizer states partitioned",
    )  # fmt: skip
    # ZeRO-3 partitions the compute-dtype weights too and fetches each module's parameters
    # when it runs, the next one prefetched: two of the largest module, and its gradient.
    zero3 = StrategyMemory(
        "full SFT, ZeRO-3",
        weights=_share(p.compute * P, n), grads=_share(p.compute * P, n),
        optimizer=_share(optimizer, n),
        gathered=c.largest_module * 3 * p.compute,
        activations=act, cache=0, overhead=overhead, budget=budget,
        note="weights, gradients and optimizer states partitioned; modules fetched as they run",
    )  # fmt: skip
    # LoRA: the base is frozen (no gradient, no optimizer state) in the compute dtype; the
    # adapters (r x (in + out) per targeted Linear, two tensors each) train in fp32, as PEFT
    # upcasts them, with AdamW: 4 weights + 4 grads + 8 moments per adapter parameter.
    adapters = o.lora_rank * c.lora_width
    adapter_tensors = 2 * c.lora_layers
    adapter_optimizer = FP32.moments * adapters + FP32.step * adapter_tensors
    lora_ddp = StrategyMemory(
        f"LoRA r={o.lora_rank}, DDP",
        weights=p.compute * P + 4 * adapters, grads=4 * adapters, optimizer=adapter_optimizer,
        gathered=0, activations=act, cache=0, overhead=overhead, budget=budget,
        note="frozen base replicated on every GPU (the reference agent's TRL job under torchrun)",
    )  # fmt: skip
    lora_fsdp = StrategyMemory(
        f"LoRA r={o.lora_rank}, FSDP2",
        weights=_share(p.compute * P + 4 * adapters, n), grads=_share(4 * adapters, n),
        optimizer=_share(adapter_optimizer, n),
        gathered=fsdp_unit * 2 * p.compute,  # frozen: no unsharded gradient to hold
        activations=act, cache=0, overhead=overhead, budget=budget,
        note="frozen base sharded over the GPUs, gathered a block at a time",
    )  # fmt: skip
    serving, fit = _serving(c, o, budget, overhead)
    return MemoryPlan(c, o, (fsdp, zero2, zero3, lora_ddp, lora_fsdp, serving), fit)


def _serving(c: Census, o: PlanOptions, budget: int, overhead: int) -> tuple[StrategyMemory, int]:
    """vLLM: bf16 weights (every expert: any token may need any), split over the tensor-
    parallel group; a KV cache for the attention layers only; a fixed-size state per sequence
    for each Mamba layer, however long the sequence. vLLM takes `gpu_memory_utilization` (0.9)
    of the GPU and fills what the weights leave with cache blocks."""
    t = o.tensor_parallel
    # KV heads are split over the group, but never below one head per GPU (vLLM replicates).
    kv_per_gpu = max(c.kv_width // t, 2 * c.kv_head_dim) if c.kv_width else 0
    kv_per_token = c.attention_layers * kv_per_gpu * 2  # bf16
    # Mamba heads (and the convolution's channels) are split over the group.
    mamba_per_seq = c.mamba_layers * (
        _share(c.mamba_conv_state, t) * 2 + _share(c.mamba_ssm_state, t) * c.mamba_ssm_state_bytes
    )
    per_seq = kv_per_token * o.seq_len + mamba_per_seq
    weights = _share(2 * c.total, t)
    vllm_budget = int(o.gpu_memory_utilization * budget)
    room = vllm_budget - weights - overhead
    fit = max(0, room // per_seq) if per_seq else (o.max_num_seqs if room >= 0 else 0)
    replicas = o.gpus // t
    return (
        StrategyMemory(
            f"vLLM, TP={t}",
            weights=weights,
            grads=0,
            optimizer=0,
            gathered=0,
            activations=0,
            cache=per_seq * o.max_num_seqs,
            overhead=overhead,
            budget=vllm_budget,
            note=(
                f"{replicas} replica{'s' if replicas != 1 else ''} of {t} GPU{'s' if t > 1 else ''};"
                f" {o.max_num_seqs} sequences of {o.seq_len} tokens in flight; budget"
                f" gpu_memory_utilization {o.gpu_memory_utilization:g} of the GPU"
            ),
        ),  # fmt: skip
        int(fit),
    )
