"""A competition as a file (issue 15, item 6): one TOML or YAML file declares the models, the
agents, the phases, the benchmarks and the arena settings; `competition apply` makes the
database say the same, idempotently, and refuses what a phase under way forbids.

* `competition_file_load(path)` reads and validates the file (`spec.py`, pure: no database).
* `competition_diff(spec)` compares it with the database: the changes in words, each one
  refused (with the reason) when a phase's state forbids it.
* `competition_apply(spec)` makes them in one transaction, or makes none.

The competition's name identifies it: a file with another name is another competition.

Dates: "now" (a phase's `starts_at`) is read when that phase is first created; afterwards the
stored start stands in for it, and lengths count from there, so applying the same file again,
a minute or a week later, changes nothing. A phase without `starts_at` starts when the one
before closes its arena (`arena_length`/`arena_closes_at`), or else when it ends.

What a phase under way forbids (the rules are in `apply.py` `_phase_refusal`, and in the README):
the start and label of a phase that started; the end of a running phase moved into the past;
anything of a frozen, serving or closed phase but when its arena closes (and nothing at all
once closed); its feedback policy once started; a running phase's GPU-hours, API credit or
storage below what an agent has used of it; removing a phase that started; the models once
phase 1 started; the benchmarks once a phase was served (evaluated); removing an agent once
phase 1 started; a scaffold budget below what the agent spent; and a second competition while
another one is under way.
"""

from arena.phases.competition_file.apply import Change, competition_apply, competition_diff
from arena.phases.competition_file.show import (
    competition_agents_unprovisioned,
    competition_show,
)
from arena.phases.competition_file.spec import (
    AgentSpec,
    CompetitionFileError,
    CompetitionSpec,
    PhaseSpec,
    competition_file_load,
    competition_spec_parse,
)

__all__ = [
    "AgentSpec",
    "Change",
    "CompetitionFileError",
    "CompetitionSpec",
    "PhaseSpec",
    "competition_agents_unprovisioned",
    "competition_apply",
    "competition_diff",
    "competition_file_load",
    "competition_show",
    "competition_spec_parse",
]
