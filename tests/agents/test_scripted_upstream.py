"""The scripted upstream is a real OpenAI-compatible server: the OpenAI client reads its whole
and streamed replies (tool calls in pieces) and the usage the proxy bills on; a policy's steps
use values captured from earlier tool outputs; summaries do not advance the play."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx2
import openai
import pytest

from agents.harness.scripted_upstream import KEY_VARIABLE, Policy, ScriptedUpstream
from tests.conftest import ROOT

STEPS = [
    {
        "say": "Submitting.",
        "tool": "shell",
        "arguments": {"command": "arena-agent submit train.sh --time 5"},
        "capture": {"job": r"submitted job (\d+)"},
    },
    {"tool": "shell", "arguments": {"command": "arena-agent job {job}", "timeout_s": 60}},
    {"final": "Done with job {job} on {cluster}."},
]


@pytest.fixture
def upstream():
    server = ScriptedUpstream(
        Policy({"model": "scripted-agent", "steps": STEPS}, {"cluster": "c1"})
    )
    server.start()
    yield server
    server.stop()


def ask(client: openai.OpenAI, messages: list[dict], **extra):
    return client.chat.completions.create(
        model="scripted-agent", messages=messages, max_tokens=200, **extra
    )


def test_whole_and_streamed_replies_carry_the_steps_with_captured_values(upstream):
    client = openai.OpenAI(base_url=upstream.base_url, api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    messages: list[dict] = [{"role": "user", "content": "Begin."}]

    first = ask(client, messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].message.content == "Submitting."
    assert first.choices[0].finish_reason == "tool_calls" and first.usage.completion_tokens > 0
    assert json.loads(call.function.arguments) == {
        "command": "arena-agent submit train.sh --time 5"
    }

    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "submitted job 5150"},
    ]
    summary = ask(client, [{"role": "user", "content": "Summarise."}])
    assert summary.choices[0].message.content.startswith("Summary")  # the play did not move

    stream = ask(client, messages, tools=tools, stream=True)
    pieces, usage = [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            pieces.append(delta_call.function.arguments or "")
    assert len(pieces) == 2 and usage is not None and usage.prompt_tokens > 0
    assert json.loads("".join(pieces)) == {"command": "arena-agent job 5150", "timeout_s": 60}

    final = ask(client, messages, tools=tools)
    assert final.choices[0].message.content == "Done with job 5150 on c1."
    assert final.choices[0].message.tool_calls is None


def test_a_capture_that_does_not_match_ends_the_play_saying_so(upstream):
    client = openai.OpenAI(base_url=upstream.base_url, api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    first = ask(client, [{"role": "user", "content": "Begin."}], tools=tools)
    messages = [
        {"role": "user", "content": "Begin."},
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_1", "content": "error: no such account"},
    ]
    stopped = ask(client, messages, tools=tools)
    assert stopped.choices[0].message.content.startswith("I stop: no job")


def test_it_starts_from_the_command_line_with_the_shipped_demo_policy():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "agents.harness.scripted_upstream", "--port", str(port),
         "--policy", "agents/harness/policies/demo.json", "--var", "model_source=/models/x"],
        cwd=ROOT, env={**os.environ, KEY_VARIABLE: "the-proxys-key"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        models = f"http://127.0.0.1:{port}/v1/models"
        listed = httpx2.get(models, headers={"Authorization": "Bearer the-proxys-key"}, timeout=5)
        assert listed.json()["data"] == [{"id": "scripted-agent", "object": "model"}]
        assert httpx2.get(models, timeout=5).status_code == 401
        wrong = httpx2.get(models, headers={"Authorization": "Bearer guess"}, timeout=5)
        assert wrong.status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)


def test_the_command_line_refuses_to_start_without_the_proxys_key():
    env = {name: value for name, value in os.environ.items() if name != KEY_VARIABLE}
    done = subprocess.run(
        [sys.executable, "-m", "agents.harness.scripted_upstream", "--port", "9",
         "--policy", "agents/harness/policies/demo.json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and KEY_VARIABLE in done.stderr


def test_a_new_conversation_starts_the_play_over():
    """The demo plays its policy once per phase: each run is a new conversation."""
    policy = Policy({"steps": STEPS}, {"cluster": "c1"})
    begin = [{"role": "user", "content": "Begin."}]
    first = policy.next_reply(begin)
    assert json.loads(first["tool_calls"][0]["function"]["arguments"])["command"].startswith(
        "arena-agent submit"
    )
    went_on = [
        *begin,
        {"role": "assistant", "content": None, "tool_calls": first["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_1", "content": "submitted job 41"},
    ]
    second = policy.next_reply(went_on)
    assert json.loads(second["tool_calls"][0]["function"]["arguments"])["command"] == (
        "arena-agent job 41"
    )
    again = policy.next_reply([{"role": "user", "content": "Begin (phase 2)."}])
    assert (
        again["tool_calls"][0]["function"]["arguments"]
        == first["tool_calls"][0]["function"]["arguments"]
    )
    assert "job" not in policy.values and policy.values["cluster"] == "c1"
