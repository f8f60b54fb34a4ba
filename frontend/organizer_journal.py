"""The organizer's sections on how agents work (the hooks in `organizer.py`): each
agent's latest experiment-journal entries, and its strategy lock-in per phase (how many
distinct approaches it tried and when it stopped trying new ones; agents/strategy.py).

Journal text is the agent's: it goes into the table as plain text, which the dashboard
escapes, cut to `TEXT_SHOWN` characters (the full entry is in the admin and the report)."""

from __future__ import annotations

from django.utils import timezone

from agents.journal import journal_latest_by_agent
from agents.strategy_selectors import lock_ins_begun
from frontend.organizer import OrganizerSection

ENTRIES_PER_AGENT = 5
TEXT_SHOWN = 400


def shortened(text: str, limit: int = TEXT_SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def journal_sections(*, agent: str | None = None) -> list[OrganizerSection]:
    """Every agent's latest entries, or only `agent`'s."""
    latest = journal_latest_by_agent(per_agent=ENTRIES_PER_AGENT)
    if agent is not None:
        latest = {agent: latest[agent]} if agent in latest else {}
    rows = [
        [
            name,
            f"{timezone.localtime(entry.created_at):%Y-%m-%d %H:%M}",
            entry.kind,
            entry.phase.label if entry.phase else "-",
            shortened(entry.text),
        ]
        for name, entries in latest.items()
        for entry in reversed(entries)  # newest first within each agent
    ]
    if not rows:
        return []
    return [
        OrganizerSection(
            title="Agents' experiment journals: latest entries",
            columns=["agent", "written", "kind", "phase", "entry"],
            rows=rows,
            note=f"Each agent's latest {ENTRIES_PER_AGENT} entries, newest first, as the agent "
            f"wrote them (cut at {TEXT_SHOWN} characters; the daily report has them whole). "
            "The journal is append-only: the database refuses changes and deletions.",
        )
    ]


def lock_in_sections(*, agent: str | None = None) -> list[OrganizerSection]:
    """Every agent's lock-in per phase, or only `agent`'s."""
    now = timezone.now()
    rows = []
    for line in lock_ins_begun(now=now):
        measure = line.measure
        if not measure.attempts or (agent is not None and line.agent != agent):
            continue
        rows.append(
            [
                line.agent,
                line.phase,
                str(measure.approaches),
                str(measure.attempts),
                f"{timezone.localtime(measure.locked_in_at):%Y-%m-%d %H:%M}"
                if measure.locked_in_at
                else "-",
                f"{measure.share_elapsed:.0%}" if measure.share_elapsed is not None else "-",
                shortened(", ".join(measure.approach_names), 300),
            ]
        )
    if not rows:
        return []
    return [
        OrganizerSection(
            title="Strategy lock-in per agent and phase",
            columns=[
                "agent",
                "phase",
                "approaches",
                "attempts",
                "last new approach",
                "of the phase elapsed",
                "approaches, in the order tried",
            ],  # fmt: skip
            rows=rows,
            note="An approach is a training job's recipe markers (SFT, DPO, LoRA, FSDP, ...) "
            "with its learning rate's order of magnitude, or a data source it registered; "
            "attempts count repeats. 'Last new approach' is when it stopped exploring (so far, "
            "while the phase runs); a small share means it locked in early. See agents/README.md.",
        )
    ]
