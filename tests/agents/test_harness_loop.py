"""The harness's loop against the scripted upstream (a real OpenAI-compatible server), its tools
run by a real agent Unix user: hostile model output gets error results, long conversations are
summarised, a restarted harness resumes, and each stop condition ends the run with its code.
The slow tests go through the platform's real proxy (daphne, an Upstream row, the agent's token)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import openai
import pytest
from django.conf import settings

from agents.harness.executor import ToolExecutor
from agents.harness.loop import ExitCode, Harness, LoopSettings
from agents.harness.run import observed_recorder
from agents.harness.scripted_upstream import Policy, ScriptedUpstream
from agents.harness.state import INTERRUPTED, ConversationStore
from agents.harness.task_statement import task_facts, task_statement
from agents.models import Agent, TrajectoryEvent, Upstream
from agents.sandboxes import UnixSandboxes
from agents.services import agent_create, token_issue
from tests import factories
from tests.conftest import ROOT, _database_url_for_subprocess
from tests.support.workers import worker_path

SANDBOXES = worker_path("/tmp/arena-sandboxes-harness-loop")
USER = "agent_hx_loop"


@pytest.fixture(scope="module")
def home() -> Path:
    sandboxes = UnixSandboxes(SANDBOXES)
    made = sandboxes.create(USER)
    yield made
    sandboxes.lock(USER)  # as deprovisioning does: no login, its processes ended
    sandboxes.remove(USER)


@pytest.fixture
def agent(db, home) -> Agent:
    made = agent_create(name="hx_loop", credit_limit=Decimal("5"))
    Agent.objects.filter(pk=made.pk).update(unix_user=USER, sandbox=str(home))
    made.refresh_from_db()
    return made


@pytest.fixture
def play():
    """A scripted upstream playing the given steps; stopped after the test."""
    started: list[ScriptedUpstream] = []

    def start(steps: list[dict], **policy: object) -> ScriptedUpstream:
        server = ScriptedUpstream(Policy({"model": "scripted-agent", "steps": steps, **policy}))
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def harness(agent, home, state_dir, base_url, *, sleep=None, **loop) -> Harness:
    return Harness(
        client=openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30),
        executor=ToolExecutor(unix_user=USER, home=home, python=str(settings.AGENTS_TRAIN_PYTHON)),
        store=ConversationStore(state_dir),
        settings=LoopSettings(model="scripted-agent", **loop),
        system_prompt="You are a test agent.",
        first_message="Begin.",
        record=observed_recorder(agent),
        **({"sleep": sleep} if sleep else {}),
    )


def agent_processes() -> list[str]:
    listed = subprocess.run(
        ["ps", "-u", USER, "-o", "pid=,args="], capture_output=True, text=True, check=False
    )
    return [line for line in listed.stdout.splitlines() if line.strip()]


def tool_events(agent) -> list[dict]:
    return [
        e.payload
        for e in TrajectoryEvent.objects.filter(agent=agent, kind="tool_call").order_by("id")
    ]


def saved(state_dir: Path) -> dict:
    return json.loads((state_dir / "conversation.json").read_text())


def shell(command: str, **extra) -> dict:
    return {"tool": "shell", "arguments": {"command": command}, **extra}


def test_a_policy_is_played_and_each_tool_call_recorded_as_observed(agent, home, tmp_path, play):
    server = play([
        shell("echo 'job 4242 submitted'", capture={"job": r"job (\d+)"}),
        {"tool": "edit_file", "arguments": {"action": "create", "path": "cfg/{job}.json",
                                            "text": "{}", "overwrite": True}},
        {"tool": "view_file", "arguments": {"path": "cfg/{job}.json"}},
        {"final": "done with {job}"},
    ])  # fmt: skip

    code = harness(agent, home, tmp_path / "state", server.base_url).run()

    assert code == ExitCode.DONE
    assert (home / "cfg" / "4242.json").owner() == USER
    recorded = tool_events(agent)
    assert [e["tool"] for e in recorded] == ["shell", "edit_file", "view_file"]
    assert recorded[0] == {"tool": "shell", "command": "echo 'job 4242 submitted'",
                           "output": "job 4242 submitted\n", "exit_code": 0,
                           "duration_s": recorded[0]["duration_s"]}  # fmt: skip
    assert recorded[2]["command"].startswith("view_file cfg/4242.json")
    assert not TrajectoryEvent.objects.filter(agent=agent, reported=True).exists()
    state = saved(tmp_path / "state")
    assert state["ended"] == {"code": 0, "reason": "the model said it was done"}
    assert state["messages"][-1] == {"role": "assistant", "content": "done with 4242"}
    assert os.stat(tmp_path / "state").st_mode & 0o777 == 0o700


def test_hostile_model_output_gets_error_results_and_never_a_crash(agent, home, tmp_path, play):
    server = play([
        {"tool": "rm_rf_everything", "arguments": {"path": "/"}},
        {"tool": "shell", "raw_arguments": '{"command": "echo unterminated'},
        {"tool": "shell", "raw_arguments": '["a", "list"]'},
        {"tool": "shell", "raw_arguments": json.dumps({"command": "x" * 300_000})},
        {"tool": "shell", "arguments": {"command": 42}},
        {"tool": "shell", "arguments": {"command": "true", "timeout_s": "forever"}},
        {"tool": "edit_file", "arguments": {"action": "delete", "path": "x"}},
        {"tool": "view_file", "arguments": {"path": "x", "start_line": -5}},
        {"final": "still standing"},
    ])  # fmt: skip

    code = harness(agent, home, tmp_path / "state", server.base_url).run()

    assert code == ExitCode.DONE
    results = [m["content"] for m in saved(tmp_path / "state")["messages"] if m["role"] == "tool"]
    expected = [
        "error: unknown tool 'rm_rf_everything'",
        "error: the arguments are not valid JSON",
        "error: the arguments must be a JSON object",
        "error: the arguments are 300015 characters; at most 256000",
        "error: 'command' must be a non-empty string",
        "error: 'timeout_s' must be a positive number of seconds",
        "error: 'action' must be create, str_replace or insert",
        "error: 'start_line' must be a whole number from 0",
    ]
    assert len(results) == len(expected)
    for result, prefix in zip(results, expected, strict=True):
        assert result.startswith(prefix), result
    recorded = tool_events(agent)
    assert len(recorded) == 8 and all(e["exit_code"] is None for e in recorded)
    assert recorded[3]["output"].startswith("error: the arguments are 300015 characters")
    assert "chars cut]" in recorded[3]["command"]  # the huge arguments, bounded in the record


def test_a_long_conversation_is_summarised_keeping_the_task_and_the_last_turns(
    agent, home, tmp_path, play
):
    steps = [shell(f"echo step {i}; head -c 3000 /dev/zero | tr '\\0' o") for i in range(12)]
    server = play([*steps, {"final": "done"}], summary="SUMMARY: steps so far, job ids none.")

    code = harness(
        agent, home, tmp_path / "state", server.base_url, context_chars=20_000, keep_turns=2
    ).run()

    assert code == ExitCode.DONE
    state = saved(tmp_path / "state")
    messages = state["messages"]
    assert state["compactions"] >= 1 and state["turns"] == 13
    assert messages[0] == {"role": "system", "content": "You are a test agent."}
    assert messages[1] == {"role": "user", "content": "Begin."}
    assert messages[2]["role"] == "user" and "SUMMARY: steps so far" in messages[2]["content"]
    assert messages[3]["role"] == "assistant"  # a turn kept whole: the call and its result
    assert (
        messages[4]["role"] == "tool"
        and messages[4]["tool_call_id"] == messages[3]["tool_calls"][0]["id"]
    )
    assert "step 11" in json.dumps(messages) and "step 0\n" not in json.dumps(messages[3:])
    assert len(json.dumps(messages)) < 20_000 + 8_000
    assert len(tool_events(agent)) == 12  # the record keeps everything the context dropped


def test_a_restarted_harness_answers_the_interrupted_call_and_resumes(agent, home, tmp_path, play):
    server = play([shell("echo one"), shell("echo two"), shell("echo three"), {"final": "done"}])
    crashing = harness(agent, home, tmp_path / "state", server.base_url)
    calls = []

    def record_then_crash(tool, command, result):
        calls.append(command)
        if len(calls) == 2:
            raise RuntimeError("the harness process died")

    crashing.record = record_then_crash
    with pytest.raises(RuntimeError):
        crashing.run()

    resumed = harness(agent, home, tmp_path / "state", server.base_url)
    assert resumed.run() == ExitCode.DONE
    messages = saved(tmp_path / "state")["messages"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert results == ["one\n\n[exit code 0]", INTERRUPTED, "three\n\n[exit code 0]"]
    # A harness restarted after the end does nothing more.
    assert harness(agent, home, tmp_path / "state", server.base_url).run() == ExitCode.DONE
    assert server.requests == 4


def test_an_upstream_that_keeps_failing_stops_the_run_after_backoff(agent, home, tmp_path):
    waits: list[float] = []
    closed = "http://127.0.0.1:9/v1"  # the discard port: nothing listens

    code = harness(
        agent, home, tmp_path / "state", closed, sleep=waits.append, max_upstream_failures=5,
        backoff_s=1.0, max_backoff_s=4.0,
    ).run()  # fmt: skip

    assert code == ExitCode.UPSTREAM_FAILING
    assert waits == [1.0, 2.0, 4.0, 4.0]
    assert "5 model calls failed in a row" in saved(tmp_path / "state")["ended"]["reason"]


def test_the_turn_limit_and_the_deadline_stop_the_run(agent, home, tmp_path, play):
    server = play([shell(f"echo {i}") for i in range(5)])
    limited = harness(agent, home, tmp_path / "a", server.base_url, max_turns=2)
    assert limited.run() == ExitCode.TURN_LIMIT and server.requests == 2

    past = datetime.now(UTC) - timedelta(seconds=1)
    late = harness(agent, home, tmp_path / "b", server.base_url, deadline=past)
    assert late.run() == ExitCode.DEADLINE and server.requests == 2


def test_the_task_statement_states_the_phases_real_budgets(agent):
    phase = factories.running_phase(label="phase-1")
    phase.gpu_hours, phase.max_gpus, phase.api_credit_usd = Decimal("750.50"), 6, Decimal("120")
    phase.save()

    text = task_statement(task_facts(agent, None))

    assert "GPU-hours: 750.5 in all" in text and "at most 6, plus 8 preemptible" in text
    assert "LLM API credit for your own experiments: $120" in text
    assert f"(ends {phase.ends_at:%Y-%m-%d %H:%M} UTC)" in text
    assert "Training on evaluation or benchmark test data" in text
    assert "another participant's artifacts" in text
    assert "arena-agent journal add" in text and "arena-agent nominate" in text
    assert "{" not in text  # every placeholder filled


# --- through the platform's proxy ---------------------------------------------------------------


def scripted_upstream_row(server: ScriptedUpstream) -> Upstream:
    return Upstream.objects.create(
        name="scripted-agent", base_url=server.base_url, upstream_model="scripted-agent",
        usd_per_million_prompt_tokens=Decimal("1"), usd_per_million_completion_tokens=Decimal("2"),
    )  # fmt: skip


@pytest.mark.slow
def test_through_the_proxy_model_calls_and_tool_calls_are_recorded_in_order(
    arena, home, tmp_path, play
):
    agent = agent_create(name="hx_proxy", credit_limit=Decimal("5"))
    Agent.objects.filter(pk=agent.pk).update(unix_user=USER, sandbox=str(home))
    server = play([shell("echo first"), shell("echo second"), {"final": "done"}])
    scripted_upstream_row(server)
    # The scaffold's token: a proxy token until the proxy bills scaffold tokens (issue 15, item 2).
    token = token_issue(agent=agent, kind="proxy")
    run = harness(agent, home, tmp_path / "state", f"{arena.url}/proxy/v1")
    run.client = openai.OpenAI(base_url=f"{arena.url}/proxy/v1", api_key=token, max_retries=0)

    assert run.run() == ExitCode.DONE

    kinds = [
        (e.kind, e.payload.get("command") or e.payload.get("reply"))
        for e in TrajectoryEvent.objects.filter(agent=agent).order_by("id")
    ]
    assert kinds == [("model_call", ""), ("tool_call", "echo first"), ("model_call", ""),
                     ("tool_call", "echo second"), ("model_call", "done")]  # fmt: skip
    first_call = TrajectoryEvent.objects.filter(agent=agent, kind="model_call").first()
    assert first_call.payload["tool_calls"][0]["name"] == "shell"
    agent.refresh_from_db()
    assert agent.credit_spent > 0  # billed on the usage the scripted upstream reported


@pytest.mark.slow
def test_a_spent_budget_ends_the_harness_process_with_its_exit_code(arena, home, tmp_path, play):
    agent = agent_create(name="hx_broke", credit_limit=Decimal("0"))
    Agent.objects.filter(pk=agent.pk).update(unix_user=USER, sandbox=str(home), active=True)
    server = play([shell("echo never"), {"final": "done"}])
    scripted_upstream_row(server)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "ARENA_PROXY_URL": f"{arena.url}/proxy/v1",
        "ARENA_SCAFFOLD_TOKEN": token_issue(agent=agent, kind="proxy"),
    }

    done = subprocess.run(
        [sys.executable, "-m", "agents.harness", "--agent", "hx_broke", "--model",
         "scripted-agent", "--state-dir", str(tmp_path / "state")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == ExitCode.BUDGET_SPENT, done.stderr[-3000:]
    assert "the scaffold's budget is spent" in done.stderr
    assert server.requests == 0 and not TrajectoryEvent.objects.filter(agent=agent).exists()


def test_the_supervisors_sigterm_stops_the_harness_and_its_running_command(
    transactional_db, home, tmp_path, play
):
    agent = agent_create(name="hx_stop", credit_limit=Decimal("5"))
    Agent.objects.filter(pk=agent.pk).update(unix_user=USER, sandbox=str(home))
    server = play([shell("setsid sleep 1004 & sleep 1005"), {"final": "never"}])
    env = {
        **os.environ,
        "DATABASE_URL": _database_url_for_subprocess(),
        "ARENA_PROXY_URL": server.base_url,  # straight to the upstream: no proxy needed here
        "ARENA_SCAFFOLD_TOKEN": "unused",
    }
    harness_process = subprocess.Popen(
        [sys.executable, "-m", "agents.harness", "--agent", "hx_stop", "--model",
         "scripted-agent", "--state-dir", str(tmp_path / "state")],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while "sleep 1005" not in " ".join(agent_processes()):
        assert time.monotonic() < deadline and harness_process.poll() is None
        time.sleep(0.1)

    harness_process.send_signal(signal.SIGTERM)

    assert harness_process.wait(timeout=30) == ExitCode.STOPPED
    assert agent_processes() == []  # the command and the child that left its group
    # The state stays for a restart, which answers the interrupted call (tested above).
    state = saved(tmp_path / "state")
    assert state["ended"] is None and state["messages"][-1]["role"] == "assistant"


def test_the_keeper_ends_a_run_on_the_harness_decisions_and_restarts_only_a_crash():
    """The keeper does not import the harness: its table of the harness's decisions must
    name the same statuses as the harness's ExitCode."""
    from agents.runs.keeper import HARNESS_DECISIONS

    assert set(HARNESS_DECISIONS) == {ExitCode.TURN_LIMIT, ExitCode.DEADLINE, ExitCode.BUDGET_SPENT}
    assert ExitCode.CRASHED not in HARNESS_DECISIONS
