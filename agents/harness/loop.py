"""The harness's loop: an OpenAI-compatible chat with tools, through the platform's proxy on
the scaffold's token, whose tools run as the agent in its sandbox and are recorded as observed.

Model output is hostile like everything else an agent controls: an unknown tool, arguments that
are not JSON or not the right types, huge arguments or too many calls in one turn each get an
error result the model can read, never a crash of the harness.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

import openai

from agents.harness.executor import ToolExecutor, ToolResult
from agents.harness.state import Conversation, ConversationStore

logger = logging.getLogger(__name__)


class ExitCode(IntEnum):
    """What the harness's exit status means to its supervisor. Only CRASHED (an uncaught error:
    Python's own status 1) is worth a restart; the others are decisions."""

    DONE = 0  # the model said it was done
    CRASHED = 1
    USAGE = 2  # bad arguments (argparse's status)
    TURN_LIMIT = 3
    DEADLINE = 4
    BUDGET_SPENT = 5  # the proxy answered 402: the scaffold's budget is spent
    UPSTREAM_FAILING = 6  # the model failed too many times in a row, with backoff
    STOPPED = 143  # SIGTERM (the supervisor's stop): the running tool call was killed


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": (
                "Run a bash command in your sandbox, as your Unix user. The working directory"
                " persists between calls. Output is cut to its head and tail when long."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_s": {"type": "number", "description": "default 600"},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "view_file",
            "description": "Show a file's lines, numbered (at most 400 lines at a time).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer", "description": "default 1"},
                    "end_line": {"type": "integer"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": (
                "create: write a new file (text; overwrite=true to replace one). str_replace:"
                " replace old by new, where old occurs exactly once. insert: add text after"
                " line number `line` (0: at the top)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["create", "str_replace", "insert"]},
                    "path": {"type": "string"},
                    "text": {"type": "string"},
                    "overwrite": {"type": "boolean"},
                    "old": {"type": "string"},
                    "new": {"type": "string"},
                    "line": {"type": "integer"},
                },
                "required": ["action", "path"],
            },
        },
    },
]

SUMMARY_PROMPT = (
    "You keep the memory of an AI research agent during a long run. Summarise the conversation"
    " below for the agent itself, who will continue from your summary alone: its progress so far,"
    " what it tried and what happened, its open hypotheses and next steps, and every concrete"
    " identifier it will need (job ids, checkpoint ids, data record ids, file paths, commands"
    " that worked). Be complete and concise; plain text."
)
SUMMARY_HEADER = "[A summary of your earlier work, written when the conversation grew long]\n"
NUDGE = "Use a tool to continue, or say in a final message that you are done."


class ToolRefused(ValueError):
    """A tool call the model got wrong; its message is the result the model reads."""


@dataclass
class LoopSettings:
    model: str
    max_turns: int = 2000
    deadline: datetime | None = None
    context_chars: int = 400_000  # about 100k tokens at 4 characters a token
    keep_turns: int = 8  # the latest turns kept whole when older ones are summarised
    max_tokens: int = 4096
    max_upstream_failures: int = 6
    backoff_s: float = 2.0
    max_backoff_s: float = 300.0
    max_tool_calls_per_turn: int = 16
    max_argument_chars: int = 256_000
    max_message_chars: int = 32_000  # what is kept of the model's own text in a turn


@dataclass
class Stop(Exception):
    code: ExitCode
    reason: str


Recorder = Callable[[str, str, ToolResult], None]  # (tool, command, result)


class Harness:
    def __init__(
        self,
        *,
        client: openai.OpenAI,
        executor: ToolExecutor,
        store: ConversationStore,
        settings: LoopSettings,
        system_prompt: str,
        first_message: str,
        record: Recorder,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.executor = executor
        self.store = store
        self.settings = settings
        self.record = record
        self.sleep = sleep
        self.system_prompt = system_prompt
        self.first_message = first_message
        self.conversation = Conversation()

    # --- the run --------------------------------------------------------------------------

    def run(self) -> ExitCode:
        self.store.prepare()
        loaded = self.store.load()
        if loaded is not None and loaded.ended is not None:
            logger.info("the run had ended: %s", loaded.ended["reason"])
            return ExitCode(loaded.ended["code"])
        self.conversation = loaded or Conversation(
            messages=[
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": self.first_message},
            ]
        )
        self.store.save(self.conversation)
        try:
            while True:
                self._turn()
        except Stop as stop:
            logger.info("the harness stops: %s", stop.reason)
            self.conversation.ended = {"code": int(stop.code), "reason": stop.reason}
            self.store.save(self.conversation)
            return stop.code

    def _turn(self) -> None:
        self._check_time()
        if self.conversation.turns >= self.settings.max_turns:
            raise Stop(ExitCode.TURN_LIMIT, f"the turn limit ({self.settings.max_turns})")
        if self.conversation.chars() > self.settings.context_chars:
            self._compact()
        message = self._ask(self.conversation.messages, tools=True)
        self.conversation.turns += 1
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        said: dict[str, Any] = {
            "role": "assistant",
            "content": _cut(content, self.settings.max_message_chars),
        }
        if not calls:
            self.conversation.messages.append(said)
            if content.strip():
                self.store.save(self.conversation)
                raise Stop(ExitCode.DONE, "the model said it was done")
            self.conversation.messages.append({"role": "user", "content": NUDGE})
            self.store.save(self.conversation)
            return
        calls = [
            _well_formed_call(call, self.conversation.turns, i) for i, call in enumerate(calls)
        ]
        said["tool_calls"] = calls
        self.conversation.messages.append(said)
        self.store.save(self.conversation)  # a restart answers calls it did not finish
        for index, call in enumerate(calls):
            if index >= self.settings.max_tool_calls_per_turn:
                output = (
                    f"[skipped: at most {self.settings.max_tool_calls_per_turn} tool calls a turn]"
                )
            else:
                self._check_time()
                output = self._call_tool(call["function"]["name"], call["function"]["arguments"])
            self.conversation.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": output}
            )
            self.store.save(self.conversation)

    def _check_time(self) -> None:
        deadline = self.settings.deadline
        if deadline is not None and datetime.now(UTC) >= deadline:
            raise Stop(ExitCode.DEADLINE, f"the deadline ({deadline:%Y-%m-%d %H:%M:%S} UTC)")

    def _seconds_left(self) -> float | None:
        deadline = self.settings.deadline
        return None if deadline is None else (deadline - datetime.now(UTC)).total_seconds()

    # --- the model ------------------------------------------------------------------------

    def _ask(self, messages: list[dict[str, Any]], *, tools: bool) -> dict[str, Any]:
        """The model's reply message, retried with backoff; Stop on a spent budget or an
        upstream that keeps failing."""
        failures = 0
        while True:
            try:
                extra: dict[str, Any] = {"tools": TOOLS} if tools else {}
                answer = self.client.chat.completions.create(
                    model=self.settings.model, messages=messages,  # type: ignore[arg-type]
                    max_tokens=self.settings.max_tokens, **extra,
                )  # fmt: skip
                if not answer.choices:
                    raise ValueError("the reply has no choices")
                return answer.choices[0].message.model_dump()
            except openai.APIStatusError as refused:
                if refused.status_code == 402:
                    raise Stop(ExitCode.BUDGET_SPENT, "the scaffold's budget is spent") from None
                problem = f"HTTP {refused.status_code}: {str(refused.message)[:300]}"
            except (openai.APIConnectionError, ValueError, TypeError, AttributeError) as failed:
                problem = f"{type(failed).__name__}: {str(failed)[:300]}"
            failures += 1
            logger.warning("model call failed (%d in a row): %s", failures, problem)
            if failures >= self.settings.max_upstream_failures:
                raise Stop(
                    ExitCode.UPSTREAM_FAILING, f"{failures} model calls failed in a row: {problem}"
                )
            wait = min(self.settings.backoff_s * 2 ** (failures - 1), self.settings.max_backoff_s)
            left = self._seconds_left()
            if left is not None:
                wait = min(wait, max(left, 0.0))
            self.sleep(wait)
            self._check_time()

    # --- context --------------------------------------------------------------------------

    def _compact(self) -> None:
        """Keep the system prompt, the first user message and the last turns whole; replace
        the turns before them by the model's own summary of them."""
        messages = self.conversation.messages
        head, rest = messages[:2], messages[2:]
        groups: list[list[dict[str, Any]]] = []
        for message in rest:  # a turn: the model's message and the tool results after it
            if message.get("role") == "assistant" or not groups:
                groups.append([])
            groups[-1].append(message)
        keep = min(self.settings.keep_turns, len(groups) - 1)
        if keep < 0 or len(groups) <= 1:
            return
        old = [m for group in groups[: len(groups) - keep] for m in group]
        kept = [m for group in groups[len(groups) - keep :] for m in group]
        transcript = _cut(_transcript(old), self.settings.context_chars // 2)
        summary = self._ask(
            [
                {"role": "system", "content": SUMMARY_PROMPT},
                {"role": "user", "content": transcript},
            ],
            tools=False,
        )
        text = _cut(summary.get("content") or "(the summary came back empty)", 32_000)
        self.conversation.messages = [*head, {"role": "user", "content": SUMMARY_HEADER + text}]
        if kept and kept[0].get("role") != "assistant":
            kept = kept[1:]  # never two user messages in a row, nor a tool result first
        self.conversation.messages += kept
        self.conversation.compactions += 1
        self.store.save(self.conversation)

    # --- tools ----------------------------------------------------------------------------

    def _call_tool(self, name: str, arguments: str) -> str:
        """Run one tool call and record it; the text the model reads back."""
        command = arguments
        try:
            parsed = self._arguments(arguments)
            if name == "shell":
                command = _text(parsed, "command")
                timeout = _number(parsed, "timeout_s")
                left = self._seconds_left()
                if left is not None:
                    timeout = min(timeout or self.executor.default_timeout_s, max(left, 1.0))
                result = self.executor.shell(command, timeout)
            elif name == "view_file":
                path = _text(parsed, "path")
                start, end = _integer(parsed, "start_line") or 1, _integer(parsed, "end_line")
                command = f"view_file {path} lines {start}..{end or 'end'}"
                result = self.executor.view_file(path, start, end)
            elif name == "edit_file":
                request = _edit_request(parsed)
                command = f"edit_file {json.dumps(request, ensure_ascii=False)}"
                result = self.executor.edit_file(request)
            else:
                raise ToolRefused(f"unknown tool {name[:100]!r}: use shell, view_file or edit_file")
        except ToolRefused as refused:
            result = ToolResult(f"error: {refused}", None, 0.0)
        self.record(name[:100] or "(no name)", command, result)
        if result.exit_code is None or name != "shell":
            return result.output
        return f"{result.output}\n[exit code {result.exit_code}]"

    def _arguments(self, arguments: str) -> dict[str, Any]:
        if len(arguments) > self.settings.max_argument_chars:
            raise ToolRefused(
                f"the arguments are {len(arguments)} characters; at most"
                f" {self.settings.max_argument_chars}: write large files with several edits"
            )
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError as bad:
            raise ToolRefused(f"the arguments are not valid JSON ({bad})") from None
        if not isinstance(parsed, dict):
            raise ToolRefused("the arguments must be a JSON object")
        return parsed


def _well_formed_call(call: Any, turn: int, index: int) -> dict[str, Any]:
    """A tool call as the API expects it back, whatever the model sent: an id, a name, and
    arguments as text."""
    call = call if isinstance(call, dict) else {}
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    name, arguments = function.get("name"), function.get("arguments")
    call_id = call.get("id")
    return {
        "id": call_id[:64] if isinstance(call_id, str) and call_id else f"call_{turn}_{index}",
        "type": "function",
        "function": {
            "name": name[:200] if isinstance(name, str) else "",
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _text(arguments: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = arguments.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ToolRefused(f"'{key}' must be a non-empty string")
    return value


def _integer(arguments: dict[str, Any], key: str) -> int | None:
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9:
        raise ToolRefused(f"'{key}' must be a whole number from 0")
    return value


def _number(arguments: dict[str, Any], key: str) -> float | None:
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10**7:
        raise ToolRefused(f"'{key}' must be a positive number of seconds")
    return float(value)


def _edit_request(arguments: dict[str, Any]) -> dict[str, Any]:
    action, path = _text(arguments, "action"), _text(arguments, "path")
    if action == "create":
        return {"action": action, "path": path, "text": _text(arguments, "text", required=False),
                "overwrite": arguments.get("overwrite") is True}  # fmt: skip
    if action == "str_replace":
        old = _text(arguments, "old")
        return {"action": action, "path": path, "old": old,
                "new": _text(arguments, "new", required=False)}  # fmt: skip
    if action == "insert":
        line = _integer(arguments, "line")
        if line is None:
            raise ToolRefused("'line' is required to insert")
        return {"action": action, "path": path, "line": line, "text": _text(arguments, "text")}
    raise ToolRefused("'action' must be create, str_replace or insert")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}…[{len(text) - head - tail} chars cut]…{text[len(text) - tail :]}"


def _transcript(messages: list[dict[str, Any]]) -> str:
    lines = []
    for message in messages:
        role = message.get("role", "")
        content = _cut(str(message.get("content") or ""), 4000)
        lines.append(f"{role}: {content}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines.append(
                f"  -> {function.get('name')}({_cut(function.get('arguments', ''), 2000)})"
            )
    return "\n".join(lines)
