"""Wiring the harness for one agent: its sandbox, its budgets, the proxy, the recorder."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import openai
from django.conf import settings
from django.db import close_old_connections, connection

from agents.harness.executor import ToolExecutor, ToolResult
from agents.harness.loop import ExitCode, Harness, LoopSettings
from agents.harness.state import ConversationStore
from agents.harness.task_statement import FIRST_MESSAGE, task_facts, task_statement
from agents.models import Agent
from agents.runs.folders import run_folder, run_tmp_key
from agents.runs.limits import RunLimits
from agents.runs.models import AgentRun
from agents.trajectory import tool_call_observed
from cluster import private_tmp

MODEL_CALL_TIMEOUT_S = 900.0


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog="python -m agents.harness", description=__doc__)
    found.add_argument("--run", help="the agent run (the supervisor's) this harness plays")
    found.add_argument("--agent", help="without --run: the agent's name")
    found.add_argument("--model", help="without --run: the proxy's model name (an Upstream)")
    found.add_argument("--state-dir", type=Path, help="without --run: where the state is kept")
    found.add_argument("--deadline", type=datetime.fromisoformat, help="ISO time, with zone")
    found.add_argument("--max-turns", type=int, default=LoopSettings.max_turns)
    found.add_argument("--context-chars", type=int, default=LoopSettings.context_chars)
    found.add_argument("--keep-turns", type=int, default=LoopSettings.keep_turns)
    found.add_argument("--max-tokens", type=int, default=LoopSettings.max_tokens)
    found.add_argument("--tool-timeout", type=float, default=600.0, help="seconds, default 600")
    return found


def _from_supervisor(
    run_id: str,
) -> tuple[str, str, Path, datetime, Callable[[], None]]:
    """The agent, model, state folder, deadline and cgroup preexec of a supervised run."""
    run = AgentRun.objects.select_related("agent").get(pk=run_id)
    preexec = RunLimits.for_run(run.pk).preexec
    folder = run_folder(settings.AGENTS_RUNS_DIR, run.pk)
    return run.agent.name, run.model, folder, run.deadline, preexec


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """The supervisor stops a run with SIGTERM: unwind, so the running tool call is killed
    with everything it started, and exit 143 (128 + SIGTERM) as a killed process would."""
    sys.exit(ExitCode.STOPPED)


def harness_main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s harness %(message)s")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    args = parser().parse_args(argv)
    preexec: Callable[[], None] | None = None
    if args.deadline is not None and args.deadline.tzinfo is None:
        parser().error("--deadline needs a time zone (e.g. 2026-12-01T12:00:00+00:00)")
    deadline: datetime | None = args.deadline
    if args.run:
        try:
            name, model, state_dir, run_deadline, preexec = _from_supervisor(args.run)
        except (AgentRun.DoesNotExist, ValueError):
            parser().error(f"no agent run {args.run!r}")
        deadline = min(deadline, run_deadline) if deadline else run_deadline
    elif args.agent and args.model and args.state_dir:
        name, model, state_dir = args.agent, args.model, args.state_dir
    else:
        parser().error("give --run RUN_ID, or --agent, --model and --state-dir")
    proxy_url, token = os.environ.get("ARENA_PROXY_URL"), os.environ.get("ARENA_SCAFFOLD_TOKEN")
    if not proxy_url or not token:
        parser().error("ARENA_PROXY_URL and ARENA_SCAFFOLD_TOKEN must be set")
    agent = Agent.objects.filter(name=name, active=True).first()
    if agent is None or not agent.unix_user:  # a restart would not help: say so, exit 2
        parser().error(f"no active, provisioned agent called {name!r}")
    facts = task_facts(agent, deadline)
    phase_end = _phase_end()
    executor = tool_executor(
        agent,
        run_id=int(args.run) if args.run else None,
        preexec=preexec,
        default_timeout_s=args.tool_timeout,
    )
    try:
        harness = Harness(
            client=openai.OpenAI(
                base_url=proxy_url, api_key=token, max_retries=0, timeout=MODEL_CALL_TIMEOUT_S
            ),
            executor=executor,
            store=ConversationStore(state_dir),
            settings=LoopSettings(
                model=model,
                max_turns=args.max_turns,
                deadline=deadline or phase_end,
                context_chars=args.context_chars,
                keep_turns=args.keep_turns,
                max_tokens=args.max_tokens,
            ),  # fmt: skip
            system_prompt=task_statement(facts),
            first_message=FIRST_MESSAGE,
            record=observed_recorder(agent),
        )
        return int(harness.run())
    finally:
        if not args.run:  # a supervised run's folders are its keeper's to remove
            private_tmp.release(executor.private)


def tool_executor(
    agent: Agent,
    *,
    run_id: int | None,
    preexec: Callable[[], None] | None = None,
    default_timeout_s: float = 600.0,
) -> ToolExecutor:
    """The harness's tools for `agent`: as its user, in its sandbox, in the run's limits
    (`preexec`), each call under a private /tmp where the agent has a quota volume: the
    supervised run's (its keeper made it and removes it), or by hand this process's own."""
    key = run_tmp_key(run_id) if run_id is not None else f"harness-{os.getpid()}"
    return ToolExecutor(
        unix_user=agent.unix_user,
        home=Path(agent.sandbox),
        python=str(settings.AGENTS_TRAIN_PYTHON),
        preexec=preexec,
        default_timeout_s=default_timeout_s,
        private=private_tmp.prepare(agent.unix_user, key),
    )


def _phase_end() -> datetime | None:
    from arena.competition.selectors import phase_running

    phase = phase_running()
    return phase.ends_at if phase is not None else None


def observed_recorder(agent: Agent) -> Callable[[str, str, ToolResult], None]:
    """Append each tool call to the agent's trajectory as observed. A days-long process: a
    connection the database dropped meanwhile is replaced before each write."""

    def record(tool: str, command: str, result: ToolResult) -> None:
        if not connection.in_atomic_block:  # a caller's transaction keeps its connection
            close_old_connections()
        tool_call_observed(
            agent=agent, tool=tool, command=command, output=result.output,
            exit_code=result.exit_code, duration_s=result.duration_s,
        )  # fmt: skip

    return record


__all__ = ["ExitCode", "harness_main", "observed_recorder", "parser", "tool_executor"]
