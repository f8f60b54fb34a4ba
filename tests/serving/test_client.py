import asyncio

import pytest

from arena.serving.client import Endpoint, StreamEnd, TextDelta, stream_chat
from tests.support.scripted_llm import Script

MESSAGES = [{"role": "user", "content": "Hello?"}]


async def collect(endpoint, timeout_s=5.0):
    events = [
        e
        async for e in stream_chat(
            endpoint, MESSAGES, max_tokens=32, temperature=0.0, timeout_s=timeout_s
        )
    ]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    ends = [e for e in events if isinstance(e, StreamEnd)]
    assert len(ends) == 1 and events[-1] is ends[0], "exactly one StreamEnd, last"
    return text, ends[0]


@pytest.mark.asyncio
async def test_streams_the_answer_and_reports_how_it_ended(scripted_llm):
    scripted_llm.scripts["echo"] = Script("Hello from the other side.")
    text, end = await collect(Endpoint(scripted_llm.base_url, "echo"))
    assert text == "Hello from the other side."
    assert end.finish_reason == "stop"
    assert end.error == ""
    assert end.first_token_s is not None and end.first_token_s <= end.total_s


@pytest.mark.asyncio
async def test_a_server_error_ends_the_stream_with_a_voter_safe_message(scripted_llm):
    scripted_llm.scripts["broken"] = Script("", fail_status=500)
    text, end = await collect(Endpoint(scripted_llm.base_url, "broken"))
    assert text == ""
    assert end.finish_reason == "error"
    assert end.error == "model server error (HTTP 500)"
    assert "broken" not in end.error and "127.0.0.1" not in end.error


@pytest.mark.asyncio
async def test_a_slow_server_times_out(scripted_llm):
    scripted_llm.scripts["sleepy"] = Script("late", hang_s=3)
    _, end = await collect(Endpoint(scripted_llm.base_url, "sleepy"), timeout_s=0.5)
    assert end.finish_reason == "error"
    assert "timed out" in end.error


@pytest.mark.asyncio
async def test_an_unreachable_server_is_an_error_not_an_exception():
    _, end = await collect(Endpoint("http://127.0.0.1:9/v1", "nobody"))
    assert end.finish_reason == "error"
    assert "unreachable" in end.error


@pytest.mark.asyncio
async def test_a_server_dying_mid_answer_ends_the_stream_with_what_was_written(scripted_llm):
    scripted_llm.scripts["crashing"] = Script("Half an answer and then", cut_after_chars=8)
    text, end = await collect(Endpoint(scripted_llm.base_url, "crashing"))
    assert text == "Half an "
    assert end.finish_reason == "error"
    assert end.error.startswith("the model server connection was lost")
    assert "crashing" not in end.error and "127.0.0.1" not in end.error


@pytest.mark.asyncio
async def test_an_unreadable_chunk_is_an_error_not_an_exception(scripted_llm):
    scripted_llm.scripts["garbled"] = Script("Fine until here", garbage_after_chars=4)
    text, end = await collect(Endpoint(scripted_llm.base_url, "garbled"))
    assert text == "Fine"
    assert end.finish_reason == "error"
    assert "garbled" not in end.error and "127.0.0.1" not in end.error


@pytest.mark.asyncio
async def test_a_stream_that_ends_without_a_finish_reason_is_a_cut_off_answer(scripted_llm):
    scripted_llm.scripts["truncated"] = Script("Where was I", finish_reason=None)
    text, end = await collect(Endpoint(scripted_llm.base_url, "truncated"))
    assert text == "Where was I"
    assert end.finish_reason == "error"
    assert end.error == "the answer ended before the model said it was finished"


@pytest.mark.asyncio
async def test_a_slow_reader_is_not_interrupted_by_the_models_deadline(scripted_llm):
    # The deadline covers waiting on the server only: a reader that takes longer than the
    # whole budget over one delta is neither cancelled nor blamed on the model.
    scripted_llm.scripts["prompt"] = Script("One two three", chunk_chars=4, delay_s=0)
    events = []
    async for event in stream_chat(
        Endpoint(scripted_llm.base_url, "prompt"),
        MESSAGES,
        max_tokens=32,
        temperature=0.0,
        timeout_s=0.5,
    ):
        events.append(event)
        if len(events) == 1:
            await asyncio.sleep(1.0)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "One two three"
    assert events[-1].finish_reason == "stop"


@pytest.mark.asyncio
async def test_streams_to_one_server_share_one_client(scripted_llm, monkeypatch):
    # Building a client builds an SSL context: once per server and event loop, not per answer.
    import openai

    built = []
    real = openai.AsyncOpenAI

    def counting(*args, **kwargs):
        built.append(kwargs.get("base_url"))
        return real(*args, **kwargs)

    monkeypatch.setattr(openai, "AsyncOpenAI", counting)
    scripted_llm.scripts["shared"] = Script("Same server, same client.", delay_s=0)
    scripted_llm.scripts["shared-too"] = Script("Another model, same server.", delay_s=0)
    for model in ("shared", "shared-too", "shared"):
        text, end = await collect(Endpoint(scripted_llm.base_url, model))
        assert end.finish_reason == "stop" and text
    assert built == [scripted_llm.base_url]


@pytest.mark.asyncio
async def test_a_stream_cut_short_leaves_the_shared_client_usable(scripted_llm):
    # The reader stops after the first delta (an answer over the arena's length limit): its
    # connection is dropped, and the next answer from the same server streams whole.
    import contextlib

    scripted_llm.scripts["long"] = Script("word " * 200, chunk_chars=5, delay_s=0.001)
    endpoint = Endpoint(scripted_llm.base_url, "long")
    stream = stream_chat(endpoint, MESSAGES, max_tokens=32, temperature=0.0, timeout_s=5)
    async with contextlib.aclosing(stream):
        first = await anext(stream)
    assert isinstance(first, TextDelta)
    text, end = await collect(endpoint)
    assert text == "word " * 200 and end.finish_reason == "stop"
