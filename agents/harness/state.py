"""The harness's conversation, persisted in a platform-owned folder so a restarted harness
resumes where it was.

The folder (`settings.AGENTS_RUNS_DIR/<run>/`, or `--state-dir`) is root's, 0700, outside every
sandbox: the agent never reads its own conversation back from disk, nor changes it. Each save
writes a temporary file in the folder, syncs it and renames it over the old one, so a crash
leaves the previous state or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "conversation.json"
INTERRUPTED = (
    "[the harness restarted before this tool call was answered: it may or may not have run;"
    " check before you repeat it]"
)


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0  # model calls that answered, across restarts
    compactions: int = 0
    ended: dict[str, Any] | None = None  # {"code": int, "reason": str} once the run stopped

    def chars(self) -> int:
        """The conversation's size in characters: the token estimate its budget is kept in."""
        return len(json.dumps(self.messages, ensure_ascii=False))


class ConversationStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / STATE_FILE

    def prepare(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.folder, 0o700)  # mkdir's mode is masked, and an old folder may differ

    def load(self) -> Conversation | None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        conversation = Conversation(
            messages=list(raw["messages"]),
            turns=int(raw.get("turns", 0)),
            compactions=int(raw.get("compactions", 0)),
            ended=raw.get("ended"),
        )
        _answer_interrupted_calls(conversation.messages)
        return conversation

    def save(self, conversation: Conversation) -> None:
        data = json.dumps(
            {
                "version": 1,
                "messages": conversation.messages,
                "turns": conversation.turns,
                "compactions": conversation.compactions,
                "ended": conversation.ended,
            },
            ensure_ascii=False,
        )
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".conversation-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def _answer_interrupted_calls(messages: list[dict[str, Any]]) -> None:
    """A crash between a model's tool calls and their results leaves calls unanswered, which
    an OpenAI-compatible API refuses: answer each, saying it may or may not have run."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        missing = [c["id"] for c in message["tool_calls"] if c["id"] not in answered]
        results = [{"role": "tool", "tool_call_id": i, "content": INTERRUPTED} for i in missing]
        if missing:
            end = index + 1
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            messages[end:end] = results
        break
