"""The one reader of a judge's streamed reply (`arena.streamed_chat`), which the category judge
and the trajectory judge share, against a real OpenAI-compatible server (the scripted one):
what it keeps, and where a hostile or broken server is stopped."""

import time

import pytest

from arena.streamed_chat import StreamedChatError, first_json_object, streamed_chat_text
from tests.support.scripted_llm import Script


def read(server, *, model="judge", timeout_s=10.0, max_chars=1_000, max_body_bytes=2_000_000):
    return streamed_chat_text(
        base_url=server.base_url,
        api_key="",
        model=model,
        messages=[{"role": "user", "content": "judge this"}],
        max_tokens=100,
        timeout_s=timeout_s,
        max_chars=max_chars,
        max_body_bytes=max_body_bytes,
    )


def test_the_reply_is_read_whole_and_cut_at_its_character_bound(scripted_llm):
    scripted_llm.scripts["judge"] = Script('{"violation": false} ✓ done', chunk_chars=3, delay_s=0)
    assert read(scripted_llm) == '{"violation": false} ✓ done'

    scripted_llm.scripts["judge"] = Script("é" * 5_000, chunk_chars=7, delay_s=0)
    assert read(scripted_llm, max_chars=100) == "é" * 100


def test_a_body_past_its_byte_bound_is_an_error_not_held(scripted_llm):
    scripted_llm.scripts["judge"] = Script("x" * 50_000, chunk_chars=5_000, delay_s=0)
    with pytest.raises(StreamedChatError, match="more than 20,000 bytes"):
        read(scripted_llm, max_body_bytes=20_000)


def test_a_server_that_keeps_dripping_is_stopped_at_the_time_limit(scripted_llm):
    # Each chunk comes well within the read timeout; only the limit on the whole call stops it.
    scripted_llm.scripts["judge"] = Script("x" * 200, chunk_chars=1, delay_s=0.05)
    started = time.monotonic()
    with pytest.raises(StreamedChatError, match="time limit"):
        read(scripted_llm, timeout_s=1.0)
    assert time.monotonic() - started < 3.0


def test_a_broken_stream_or_a_failing_server_is_an_error(scripted_llm):
    scripted_llm.scripts["judge"] = Script("abcdefgh", chunk_chars=2, garbage_after_chars=4)
    with pytest.raises(StreamedChatError, match="not valid JSON"):
        read(scripted_llm)
    scripted_llm.scripts["judge"] = Script("", fail_status=503)
    with pytest.raises(StreamedChatError, match="answered HTTP 503"):
        read(scripted_llm)


def test_the_first_wanted_object_is_found_in_a_fence_or_in_prose():
    def wanted(data):
        return isinstance(data.get("ok"), bool)

    assert first_json_object('prose {"ok": 1} then {"ok": true}', wanted) == {"ok": True}
    fenced = '{"ok": false} and ```json\n{"ok": true}\n```'
    assert first_json_object(fenced, wanted) == {"ok": True}  # the fence is read first
    assert first_json_object("no object here", wanted) is None
    started = time.monotonic()
    assert first_json_object("{" * 200_000, wanted) is None  # a few starts, not every brace
    assert time.monotonic() - started < 2.0
