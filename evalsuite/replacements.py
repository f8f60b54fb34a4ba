"""Agents whose benchmark results stand replaced by the base model's, and why.

A confirmed rule violation replaces the agent's results with the base model's, as the published
benchmark practice does. Violations are confirmed in `safety`, which reads evalsuite; evalsuite
must not read it back. So evalsuite asks the sources registered here (`safety` registers its
`confirmed_violations` when the app loads, see `SafetyConfig.ready`), and `selectors` applies
the answer in one place (`phase_models`, the agent's own view), so that `evals report`, the
correlations, the agent API and the dashboard all agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from arena.competition.models import Phase

# phase (None: any) -> agent name -> the rules it broke, in words
ReplacementSource = Callable[[Phase | None], Mapping[str, Sequence[str]]]

_sources: list[ReplacementSource] = []


def replacement_source_register(source: ReplacementSource) -> None:
    """Add a source of confirmed violations (idempotent: a source counts once)."""
    if source not in _sources:
        _sources.append(source)


def replaced_agents(phase: Phase | None) -> dict[str, list[str]]:
    """Agent name -> the confirmed violations (concerning `phase`) for which its benchmark
    results are the base model's; empty for everyone else."""
    found: dict[str, set[str]] = {}
    for source in _sources:
        for agent, rules in source(phase).items():
            found.setdefault(agent, set()).update(rules)
    return {agent: sorted(rules) for agent, rules in sorted(found.items())}
