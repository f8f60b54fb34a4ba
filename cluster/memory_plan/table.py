"""The plan as the command prints it: parameters by kind, then a row per strategy."""

from __future__ import annotations

from cluster.memory_plan.arithmetic import GIB, MemoryPlan


def _b(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n:,}"


def _g(n: int) -> str:
    return f"{n / GIB:.1f}" if n else "-"


def format_plan(plan: MemoryPlan, source: str = "") -> str:
    c, o = plan.census, plan.options
    lines = [f"{source}: {c.model_type} ({c.architecture})" if source else c.architecture]
    active = f"{_b(c.active)} active per token"
    if c.experts:
        active += f" ({c.experts_per_token} of {c.experts} routed experts)"
    if c.input_embedding:
        active += f", {_b(c.active - c.input_embedding)} without the input embedding table"
    lines.append(f"parameters: {_b(c.total)} total, {active}")
    lines += [f"  {kind:<16} {_b(n):>12}" for kind, n in c.by_kind.items() if n]
    lines.append(
        f"memory per GPU in GiB on {o.gpus} x {o.gpu_memory_gib:g} GiB: {o.precision.name},"
        f" micro-batch {o.micro_batch} x {o.seq_len} tokens, activation checkpointing"
    )
    header = ("strategy", "weights", "grads", "optim", "gathered", "activ", "cache", "overhd",
              "total", "budget", "fits")  # fmt: skip
    rows = [header] + [
        (s.strategy, _g(s.weights), _g(s.grads), _g(s.optimizer), _g(s.gathered),
         _g(s.activations), _g(s.cache), _g(s.overhead), _g(s.total), _g(s.budget),
         "yes" if s.fits else "NO")
        for s in plan.strategies
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    lines += [f"  {s.strategy}: {s.note}" for s in plan.strategies]
    lines.append(
        f"  vLLM: at most {plan.sequences_that_fit} sequences of {o.seq_len} tokens fit at once"
        " in what the weights leave of one replica's budget"
    )
    return "\n".join(lines)
