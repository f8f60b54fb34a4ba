"""Strategy lock-in: how many distinct approaches an agent tried in a phase, and when it stopped
exploring. Pure functions over plain descriptors; the database side is
`agents/strategy_selectors.py`. The definition is in agents/README.md ("Strategy lock-in").

An *approach* is a key the platform can compute from what it holds, never from what the agent
says about itself:
- a training job: the recipe markers in its name and script (SFT, DPO, LoRA, FSDP, ...) and the
  order of magnitude of its learning rate. A job with neither (an evaluation, `echo`, a data
  download) is not an attempt at an approach and is left out;
- a data record: each data source it names (a data set id or URL, normalised), since bringing
  in a new data source is trying something new.
The lock-in time is when the last approach not seen before first appeared; after it the agent
only repeats approaches it had already tried (exploitation).

Scripts and sources are agent-written and hostile: only their first `SCRIPT_BYTES_READ`
characters are read, and the patterns below are linear (no nested quantifiers).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

SCRIPT_BYTES_READ = 64 * 1024
SOURCE_CHARS_KEPT = 200

# Marker -> the spellings that show it, as whole words (case-insensitive). Families, not
# libraries: `trl`'s SFTTrainer and a hand-written SFT loop both say "sft".
RECIPE_MARKERS: dict[str, tuple[str, ...]] = {
    "sft": ("sft", "sfttrainer", "supervised_finetune", "supervised-finetune"),
    "dpo": ("dpo", "dpotrainer"),
    "orpo": ("orpo", "orpotrainer"),
    "kto": ("kto", "ktotrainer"),
    "simpo": ("simpo",),
    "ppo": ("ppo", "ppotrainer"),
    "grpo": ("grpo", "grpotrainer"),
    "reward-model": ("rewardtrainer", "reward_model", "reward-model"),
    "distillation": ("distill", "distillation", "distil"),
    "lora": ("lora", "peft"),
    "qlora": ("qlora",),
    "fsdp": ("fsdp",),
    "deepspeed": ("deepspeed", "zero3", "zero2"),
    "merge": ("mergekit",),
}
_SPELLING_TO_MARKER = {
    spelling: marker for marker, spellings in RECIPE_MARKERS.items() for spelling in spellings
}
# Words are runs of letters, digits, '_' and '-': `--use_lora`, `dpo-v2`, `zero3` split into
# the parts compared below. One pass, no backtracking.
_WORD = re.compile(r"[a-z0-9]+(?:[_-][a-z0-9]+)*")
# `lr=2e-5`, `--learning_rate 1e-4`, `learning-rate: 0.0003`, `LR=5E-6`. The number is a
# bounded run of digits, so a hostile script cannot make this slow.
_LEARNING_RATE = re.compile(
    r"(?:learning[_-]?rate|(?<![a-z0-9_])lr)[\"']?\s{0,8}[:=]?\s{0,8}[\"']?"
    r"([0-9]{0,12}\.?[0-9]{1,12}(?:e[-+]?[0-9]{1,3})?)"
)


@dataclass(frozen=True)
class Attempt:
    """One thing an agent did that shows an approach: `approach` is its key, `at` its time,
    `what` a short label for people (the job id, the data record)."""

    at: dt.datetime
    approach: str
    what: str = ""


@dataclass(frozen=True)
class LockIn:
    approaches: int  # distinct approaches tried
    attempts: int  # attempts counted (jobs and data sources), repeats included
    locked_in_at: dt.datetime | None  # when the last new approach appeared; None: none tried
    share_elapsed: float | None  # of the phase, at lock-in, in [0, 1]; None: none tried
    approach_names: tuple[str, ...]  # in the order they first appeared

    @property
    def attempts_after_lock_in(self) -> int:
        return self.attempts - self.approaches if self.approaches else 0


def job_approach(name: str, script: str) -> str | None:
    """A training job's approach key, e.g. "dpo+lora lr~1e-5"; None for a job that shows no
    recipe marker and no learning rate (not a training attempt)."""
    text = f"{name[:200]}\n{script[:SCRIPT_BYTES_READ]}".lower()
    markers: set[str] = set()
    for word in _WORD.findall(text):
        for part in {word, *re.split(r"[_-]", word)}:
            marker = _SPELLING_TO_MARKER.get(part)
            if marker is not None:
                markers.add(marker)
    if "qlora" in markers:
        markers.discard("lora")  # QLoRA is its own family, not LoRA plus something
    exponent = learning_rate_exponent(text)
    if not markers and exponent is None:
        return None
    recipe = "+".join(sorted(markers)) or "unmarked"
    return recipe if exponent is None else f"{recipe} lr~1e{exponent}"


def learning_rate_exponent(text: str) -> int | None:
    """The order of magnitude (floor of log10) of the first positive learning rate in `text`;
    2e-5 and 9e-5 are one family, 1e-4 another."""
    for match in _LEARNING_RATE.finditer(text.lower()):
        try:
            value = float(match.group(1))
        except ValueError:
            continue
        if value > 0 and math.isfinite(value):
            return math.floor(math.log10(value) + 1e-9)
    return None


def data_approach(source: str) -> str:
    """A data source's approach key: the id or URL without scheme, `www.`, the Hugging Face
    `datasets/` prefix, a trailing slash or case, so one data set spelled two ways is one."""
    text = source.strip().lower()[: SOURCE_CHARS_KEPT * 2]
    for prefix in ("https://", "http://", "hf://"):
        text = text.removeprefix(prefix)
    text = text.removeprefix("www.")
    for prefix in ("huggingface.co/datasets/", "datasets/"):
        text = text.removeprefix(prefix)
    return "data:" + text.rstrip("/")[:SOURCE_CHARS_KEPT]


def lock_in(attempts: Iterable[Attempt], *, starts_at: dt.datetime, ends_at: dt.datetime) -> LockIn:
    """Distinct approaches among `attempts` and when the last new one appeared, as a share of
    the phase from `starts_at` to `ends_at` (clamped to [0, 1]: an attempt before the phase
    began counts as at its start). Attempts at the same time are taken in the order given."""
    if ends_at <= starts_at:
        raise ValueError(f"the phase must end after it starts ({starts_at} .. {ends_at})")
    first_seen: dict[str, dt.datetime] = {}
    count = 0
    for attempt in sorted(attempts, key=lambda a: a.at):
        count += 1
        first_seen.setdefault(attempt.approach, attempt.at)
    if not first_seen:
        return LockIn(0, 0, None, None, ())
    locked_in_at = max(first_seen.values())
    share = (locked_in_at - starts_at) / (ends_at - starts_at)
    return LockIn(
        approaches=len(first_seen),
        attempts=count,
        locked_in_at=locked_in_at,
        share_elapsed=min(1.0, max(0.0, share)),
        approach_names=tuple(first_seen),
    )
