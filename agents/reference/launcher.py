"""The reference agent's sbatch script: torchrun, one process per GPU, on one node or several.

Written like the platform's `cluster/launchers` (a plain template file with `{{ name }}`
placeholders, every value validated and shell-quoted), but carried with the agent: an agent
brings its own job scripts, and the platform's code is not readable from its sandbox.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

TEMPLATE = Path(__file__).resolve().parent / "templates" / "torchrun.sbatch"
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:/%@+=-]+")  # #SBATCH lines are not parsed by a shell
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Template(string.Template):
    """`{{ name }}` placeholders: `$` belongs to bash in the template."""

    delimiter = "{{"
    # typeshed declares a compiled Pattern; string.Template compiles a str pattern itself.
    pattern = cast(
        "re.Pattern[str]",
        r"""
    \{\{(?:
        (?P<escaped>(?!x)x) |
        \s*(?P<named>[a-z_][a-z0-9_]*)\s*\}\} |
        (?P<braced>(?!x)x) |
        (?P<invalid>)
    )
    """,
    )


def render_job_script(
    *,
    job_name: str,
    nodes: int,
    gpus_per_node: int,
    time_limit_minutes: int,
    workdir: Path,
    python: str,
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> str:
    """The sbatch script that runs `python -m torch.distributed.run ... command`; ValueError
    on anything that could not be carried safely."""
    for name, value in (("job_name", job_name), ("workdir", str(workdir))):
        if not _SBATCH_VALUE.fullmatch(value):
            raise ValueError(f"{name} {value!r}: use letters, digits and _ . , : / % @ + = -")
    if not Path(workdir).is_absolute():
        raise ValueError(f"workdir must be absolute, got {workdir}")
    for name, number in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {number!r}")
    if isinstance(time_limit_minutes, bool) or time_limit_minutes < 1:
        raise ValueError(f"time_limit_minutes must be >= 1, got {time_limit_minutes!r}")
    if isinstance(command, str) or not command:
        raise ValueError("command must be a non-empty list of arguments")
    env = dict(env or {})
    bad = [name for name in env if not _ENV_NAME.fullmatch(name) or name == "LAUNCH_PYTHON"]
    if bad:
        raise ValueError(f"env name {bad[0]!r} cannot be set")
    if any("\x00" in part for part in [*command, python, *env.values()]):
        raise ValueError("arguments must not contain NUL bytes")
    q = shlex.quote
    exports = [f"export {name}={q(value)}" for name, value in sorted(env.items())]
    exports.append(f"export LAUNCH_PYTHON={q(python)}")
    return _Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
        job_name=q(job_name),
        nodes=str(nodes),
        gpus_per_node=str(gpus_per_node),
        time_limit_minutes=str(time_limit_minutes),
        workdir=q(str(workdir)),
        exports="\n".join(exports),
        command=" ".join(q(arg) for arg in command),
    )
