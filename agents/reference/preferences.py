"""Phase 2: preference pairs from the agent's vote export.

The export is JSONL, one battle a line, in the Chatbot Arena "clean battle" format: `battle_id`,
`model_a`, `model_b`, `winner` (`model_a`, `model_b`, `tie`, `tie (bothbad)`), `tstamp`,
`judge`, `phase`, `conv_metadata`, and `conversation_a` / `conversation_b`, each a list of
`{"role", "content"}` messages ending with the model's answer. A decisive battle gives one pair
for DPO: the prompt (everything before the final answer, the same in both conversations), the
winner's answer as `chosen` and the loser's as `rejected`. Ties carry no preference.

Standard library only: the agent reads its export before any training interpreter starts.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINNERS = {"model_a", "model_b", "tie", "tie (bothbad)"}
DECISIVE = {"model_a", "model_b"}
Message = dict[str, str]


class ExportError(ValueError):
    """A vote export the agent cannot use, said with the line at fault."""


@dataclass(frozen=True)
class Battle:
    battle_id: str
    model_a: str
    model_b: str
    winner: str
    conversation_a: list[Message]
    conversation_b: list[Message]


@dataclass(frozen=True)
class PreferencePair:
    battle_id: str
    prompt: list[Message]
    chosen: str
    rejected: str
    chosen_model: str
    rejected_model: str

    def as_dpo_row(self) -> dict[str, Any]:
        """TRL's conversational preference format."""
        return {
            "prompt": self.prompt,
            "chosen": [{"role": "assistant", "content": self.chosen}],
            "rejected": [{"role": "assistant", "content": self.rejected}],
        }


@dataclass
class PairsReport:
    battles: int = 0
    decisive: int = 0
    pairs: list[PreferencePair] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def describe(self) -> str:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        return (
            f"{self.battles} battles, {self.decisive} decisive, {len(self.pairs)} preference "
            f"pairs" + (f" (skipped: {reasons})" if reasons else "")
        )


def read_battles(path: Path) -> list[Battle]:
    """Every battle in the export, or ExportError naming the first bad line."""
    battles = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                battles.append(_battle(line, where=f"{path}, line {number}"))
    return battles


def _battle(line: str, *, where: str) -> Battle:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as bad:
        raise ExportError(f"{where} is not JSON ({bad.msg}, column {bad.colno})") from None
    if not isinstance(row, dict):
        raise ExportError(f"{where} is not a JSON object")
    for name in ("battle_id", "model_a", "model_b", "winner"):
        if not isinstance(row.get(name), str) or not row[name]:
            raise ExportError(f"{where} has no '{name}' (a non-empty string)")
    if row["winner"] not in WINNERS:
        raise ExportError(
            f"{where}: winner {row['winner']!r} is not one of {', '.join(sorted(WINNERS))}"
        )
    return Battle(
        battle_id=row["battle_id"],
        model_a=row["model_a"],
        model_b=row["model_b"],
        winner=row["winner"],
        conversation_a=_conversation(row, "conversation_a", where=where),
        conversation_b=_conversation(row, "conversation_b", where=where),
    )


def _conversation(row: dict[str, Any], name: str, *, where: str) -> list[Message]:
    messages = row.get(name)
    if not isinstance(messages, list) or not messages:
        raise ExportError(f"{where} has no '{name}' (a list of messages with the answers)")
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in {"system", "user", "assistant"}
            or not isinstance(message.get("content"), str)
        ):
            raise ExportError(
                f"{where}: {name}[{i}] is not a message with a role (system, user or "
                "assistant) and a string content"
            )
    if messages[-1]["role"] != "assistant" or not any(m["role"] == "user" for m in messages):
        raise ExportError(f"{where}: {name} must hold a user prompt and end with the answer")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def preference_pairs(battles: list[Battle]) -> PairsReport:
    """One pair per decisive battle whose two answers share a prompt and differ."""
    report = PairsReport(battles=len(battles))
    seen: set[tuple[str, str, str]] = set()
    for battle in battles:
        if battle.winner not in DECISIVE:
            report.skipped["ties"] += 1
            continue
        report.decisive += 1
        prompt_a, answer_a = battle.conversation_a[:-1], battle.conversation_a[-1]["content"]
        prompt_b, answer_b = battle.conversation_b[:-1], battle.conversation_b[-1]["content"]
        if prompt_a != prompt_b:
            report.skipped["with different prompts"] += 1
            continue
        if battle.winner == "model_a":
            chosen, rejected, won, lost = answer_a, answer_b, battle.model_a, battle.model_b
        else:
            chosen, rejected, won, lost = answer_b, answer_a, battle.model_b, battle.model_a
        if chosen.strip() == rejected.strip():
            report.skipped["with the same answer twice"] += 1
            continue
        key = (json.dumps(prompt_a, sort_keys=True), chosen, rejected)
        if key in seen:
            report.skipped["repeated"] += 1
            continue
        seen.add(key)
        report.pairs.append(PreferencePair(battle.battle_id, prompt_a, chosen, rejected, won, lost))
    return report
