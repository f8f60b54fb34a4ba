"""Memory per GPU for training and serving a Hugging Face model, from its `config.json` alone.

Two halves. `census` builds the model on PyTorch's meta device (shapes, no storage) with the
installed transformers, never remote code, and counts its parameters by kind, the active ones
per token, and the shapes the arithmetic needs (decoder blocks, KV and Mamba state widths).
`memory_plan` is arithmetic over that census: bytes per GPU for full SFT under FSDP2, DeepSpeed
ZeRO-2 and ZeRO-3, LoRA, and vLLM serving, and whether each fits. cluster/README.md ("Memory
planning") walks through the formulas with the real 30B-A3B figures.

The static part (weights, gradients, optimizer states) is exact for the stated precision: on
CPU, the bytes a real AdamW step leaves in parameters, gradients and optimizer state equal it
(tests/cluster/test_memory_plan.py). Gathered units, activations, caches and the runtime
overhead are estimates, each with its reason beside it.

The config is untrusted (an agent's checkpoint may carry it): it is read with a size bound,
as JSON only, and every size in it is bounded before anything is built. No Django here.

`config` reads and bounds the file, `census` counts the model, `arithmetic` plans the bytes,
`table` prints them; everything is imported from here.
"""

from cluster.memory_plan.arithmetic import (
    BF16_MIXED,
    FP32,
    GIB,
    PRECISIONS,
    MemoryPlan,
    PlanOptions,
    Precision,
    StrategyMemory,
    activation_bytes,
    memory_plan,
)
from cluster.memory_plan.census import KINDS, Census, census
from cluster.memory_plan.config import MAX_CONFIG_BYTES, PlanError, check_sizes, read_hub_config
from cluster.memory_plan.table import format_plan

__all__ = [
    "BF16_MIXED", "FP32", "GIB", "KINDS", "MAX_CONFIG_BYTES", "PRECISIONS", "Census",
    "MemoryPlan", "PlanError", "PlanOptions", "Precision", "StrategyMemory", "activation_bytes",
    "census", "check_sizes", "format_plan", "memory_plan", "read_hub_config",
]  # fmt: skip
