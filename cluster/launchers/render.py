"""Render sbatch scripts that launch multi-node PyTorch training under Slurm.

Two kinds, both one `torchrun` agent per node (`srun`, one task per node) starting
`gpus_per_node` worker processes, with a c10d rendezvous on the allocation's first node:

- `torchrun_fsdp2`: runs `command` (e.g. `-m cluster.training.sft_fsdp2 --model ...`).
- `deepspeed_zero`: the same launch of a script that calls `deepspeed.initialize` (e.g.
  `-m cluster.training.sft_deepspeed ...`); the job first writes a ZeRO config JSON into the
  working directory and appends `--deepspeed --deepspeed_config PATH` (the arguments of
  `deepspeed.add_config_arguments`).

`command` is what follows torchrun's own options: a script path and its arguments, or
`-m module ...`. Every interpolated value is validated and shell-quoted; the templates are plain
files next to this module (`templates/*.sbatch`), filled with `{{ name }}` placeholders.
"""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

LauncherKind = Literal["torchrun_fsdp2", "deepspeed_zero"]
KINDS: tuple[str, ...] = get_args(LauncherKind)
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
FSDP2_MODULE = "cluster.training.sft_fsdp2"
DEEPSPEED_MODULE = "cluster.training.sft_deepspeed"  # accepts what deepspeed_zero appends

# Values on `#SBATCH` lines: sbatch parses those lines itself (not a shell), so rather than rely
# on its quote handling, only characters that never need quoting are accepted there.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:/%@+=-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the script itself; an `env` entry of the same name would be silently overwritten.
RESERVED_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "LAUNCH_PYTHON", "DS_CONFIG"})


_PLACEHOLDER = r"""
\{\{(?:
    (?P<escaped>(?!x)x) |
    \s*(?P<named>[a-z_][a-z0-9_]*)\s*\}\} |
    (?P<braced>(?!x)x) |
    (?P<invalid>)
)
"""


class _Template(string.Template):
    """`{{ name }}` placeholders: `$` belongs to the shell in these files."""

    delimiter = "{{"
    # string.Template compiles this string into the class's Pattern when the class is made.
    pattern = _PLACEHOLDER  # type: ignore[assignment]


def zero_config(stage: int) -> dict[str, Any]:
    """The ZeRO config the deepspeed_zero job writes (fp32, micro-batch 1, clipping 1.0)."""
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {
            "stage": stage,
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        "bf16": {"enabled": False},
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if stage == 3:  # so save_16bit_model / a full state dict can be gathered at the end
        cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    return cfg


def render_launcher(
    kind: LauncherKind,
    *,
    job_name: str,
    account: str,
    qos: str,
    nodes: int,
    gpus_per_node: int,
    time_limit_minutes: int,
    workdir: Path,
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    output: str = "slurm-%j.out",
    python: str = "python3",
    zero_stage: int = 2,
) -> str:
    """A complete sbatch script for `kind`; raises ValueError on any invalid argument.

    `python` is the interpreter that runs `torch.distributed.run` on every node (a venv's
    `bin/python`, readable by the job's user). `zero_stage` (1-3) only applies to
    `deepspeed_zero`. `output` is relative to `workdir` unless absolute.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown launcher kind {kind!r}; expected one of {', '.join(KINDS)}")
    _check_sbatch_value("job_name", job_name)
    _check_sbatch_value("account", account)
    _check_sbatch_value("qos", qos)
    _check_sbatch_value("output", output)
    _check_positive("nodes", nodes)
    _check_positive("gpus_per_node", gpus_per_node)
    _check_positive("time_limit_minutes", time_limit_minutes)
    workdir = Path(workdir)
    if not workdir.is_absolute():
        raise ValueError(f"workdir must be an absolute path, got {str(workdir)!r}")
    _check_sbatch_value("workdir", str(workdir))
    if isinstance(command, str) or not command:
        raise ValueError("command must be a non-empty list of arguments (not a string)")
    for i, arg in enumerate(command):
        _check_arg(f"command[{i}]", arg)
    if not python:
        raise ValueError("python must be a non-empty path")
    _check_arg("python", python)
    env = dict(env or {})
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"env name {name!r} is not a valid shell variable name")
        if name in RESERVED_ENV:
            raise ValueError(f"env name {name!r} is set by the launcher itself")
        _check_arg(f"env[{name!r}]", value)
    if kind == "deepspeed_zero" and zero_stage not in (1, 2, 3):
        raise ValueError(f"zero_stage must be 1, 2 or 3, got {zero_stage!r}")
    if kind == "deepspeed_zero" and FSDP2_MODULE in command:
        # Its strict argument parser would reject the --deepspeed options appended below.
        raise ValueError(f"{FSDP2_MODULE} takes no DeepSpeed options: run {DEEPSPEED_MODULE}")

    q = shlex.quote
    exports = [f"export {name}={q(value)}" for name, value in sorted(env.items())]
    exports.append(f"export LAUNCH_PYTHON={q(python)}")
    values = {
        "job_name": q(job_name),
        "account": q(account),
        "qos": q(qos),
        "nodes": str(nodes),
        "gpus_per_node": str(gpus_per_node),
        "time_limit_minutes": str(time_limit_minutes),
        "workdir": q(str(workdir)),
        "output": q(output),
        "exports": "\n".join(exports),
        "command": " ".join(q(arg) for arg in command),
    }
    if kind == "deepspeed_zero":
        values["zero_stage"] = str(zero_stage)
        values["zero_config"] = json.dumps(zero_config(zero_stage), indent=2)
    text = (TEMPLATES_DIR / f"{kind}.sbatch").read_text(encoding="utf-8")
    return _Template(text).substitute(values)


def _check_sbatch_value(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    if re.search(r"\s", value):
        raise ValueError(f"{name} must not contain whitespace or newlines: {value!r}")
    if not _SBATCH_VALUE.fullmatch(value):
        raise ValueError(
            f"{name} {value!r} has characters an #SBATCH line cannot carry safely; "
            "use letters, digits and _ . , : / % @ + = -"
        )


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _check_arg(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL bytes")
