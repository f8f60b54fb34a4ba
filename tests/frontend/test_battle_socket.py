"""The battle WebSocket, driven by Channels' test communicator against scripted models."""

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from arena.battles.models import Battle
from arena.battles.services import BattleRefused, battle_create, vote_record
from arena.serving.client import Endpoint, TextDelta
from frontend.consumers import SIDE_FAILED
from frontend.routing import websocket_urlpatterns
from tests import factories
from tests.support.scripted_llm import Script

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

VOTER = "socket-voter"
VOTER_KEY = factories.voter_key(VOTER)


def scripted_pair(scripted_llm, text_one: str, text_two: str, **script_options):
    one = factories.contestant(
        "alpha-model", endpoint=Endpoint(scripted_llm.base_url, "alpha-model")
    )
    two = factories.contestant("beta-model", endpoint=Endpoint(scripted_llm.base_url, "beta-model"))
    scripted_llm.scripts["alpha-model"] = Script(text_one, **script_options)
    scripted_llm.scripts["beta-model"] = Script(text_two, **script_options)
    return one, two


async def run_battle(battle_id: str, voter: str = VOTER) -> tuple[list[dict], bool]:
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/battles/{battle_id}/"
    )
    communicator.scope["session"] = {"arena_voter": voter}
    connected, _ = await communicator.connect(timeout=20)  # a loaded machine is slow to accept
    frames: list[dict] = []
    if connected:
        while True:
            frame = await communicator.receive_json_from(timeout=20)
            frames.append(frame)
            if frame["type"] in {"battle_done", "error"}:
                break
    await communicator.disconnect()
    return frames, connected


def new_battle(prompt: str = "Say something") -> Battle:
    return battle_create(prompt=prompt, voter_key=factories.voter_key(VOTER), ip_hash="ip")


async def db(fn, *args, **kwargs):
    from channels.db import database_sync_to_async

    return await database_sync_to_async(fn)(*args, **kwargs)


async def test_both_answers_stream_by_side_and_are_stored_with_style(scripted_llm, settings):
    settings.ARENA_MIN_VOTE_SECONDS = 2.0
    await db(scripted_pair, scripted_llm, "## Plan\n- **one**\n- two", "Just plain text.")
    battle = await db(new_battle)
    frames, connected = await run_battle(battle.pk)
    assert connected
    deltas = [f for f in frames if f["type"] == "delta"]
    assert {f["side"] for f in deltas} == {"a", "b"}
    assert frames[-1] == {"type": "battle_done", "votable": True, "vote_after_ms": 2000}
    assert all(
        set(f) <= {"type", "side", "text", "html", "error", "votable", "vote_after_ms"}
        for f in frames
    )

    stored = await db(
        lambda: {
            a.contestant.display_name: a
            for a in Battle.objects.get(pk=battle.pk).answers.select_related("contestant")
        }
    )
    markdown = stored["alpha-model"]
    assert markdown.text == "## Plan\n- **one**\n- two"
    assert markdown.header_counts["h2"] == 1
    assert markdown.list_counts == {"ordered": 0, "unordered": 2}
    assert markdown.bold_counts["**"] == 1
    assert markdown.finish_reason == "stop"
    assert markdown.first_token_ms is not None and markdown.total_ms >= markdown.first_token_ms
    assert (await db(Battle.objects.get, pk=battle.pk)).state == Battle.State.COMPLETE


async def test_no_frame_names_a_contestant_before_the_vote(scripted_llm):
    await db(scripted_pair, scripted_llm, "First answer.", "Second answer.")
    battle = await db(new_battle)
    frames, _ = await run_battle(battle.pk)
    raw = repr(frames)
    for secret in ("alpha-model", "beta-model", scripted_llm.base_url, str(scripted_llm.port)):
        assert secret not in raw


def side_frames(frames: list[dict]) -> dict[str, dict]:
    """Each side's closing frame, without its side: what the page shows when an answer ends."""
    return {
        f["side"]: {k: v for k, v in f.items() if k != "side"}
        for f in frames
        if f["type"] == "side_done"
    }


async def test_how_an_answer_ended_is_not_shown_before_the_vote(scripted_llm):
    # A base model never stops: it always hits the length limit. Saying so on its side would
    # name it before the vote, so both sides end alike, live and on replay.
    one, two = await db(scripted_pair, scripted_llm, "Same words.", "Same words.")
    scripted_llm.scripts["beta-model"] = Script("Same words.", finish_reason="length")
    battle = await db(new_battle)

    for _ in ("live", "replay"):
        frames, _ = await run_battle(battle.pk)
        ended = side_frames(frames)
        assert (
            ended["a"]
            == ended["b"]
            == {"type": "side_done", "html": ended["a"]["html"], "error": ""}
        )
        assert "length" not in repr(frames)

    reasons = await db(
        lambda: {
            a.contestant_id: a.finish_reason for a in Battle.objects.get(pk=battle.pk).answers.all()
        }
    )
    assert reasons == {one.pk: "stop", two.pk: "length"}  # stored, for after the vote


async def test_different_failures_read_the_same_before_the_vote(scripted_llm):
    # A server's error message (an HTTP status, a lost connection) differs by how and where a
    # model is served, which would tell a reference model from an agent's.
    await db(scripted_pair, scripted_llm, "", "")
    scripted_llm.scripts["alpha-model"] = Script("", fail_status=503)
    scripted_llm.scripts["beta-model"] = Script("Half an answer and then", cut_after_chars=8)
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    ended = side_frames(frames)
    assert ended["a"]["error"] == ended["b"]["error"] == SIDE_FAILED
    assert "503" not in repr(frames) and "connection" not in repr(frames)


async def test_a_script_tag_in_an_answer_arrives_escaped(scripted_llm):
    await db(
        scripted_pair, scripted_llm, "<script>alert(1)</script> <img src=x onerror=alert(2)>", "ok"
    )
    battle = await db(new_battle)
    frames, _ = await run_battle(battle.pk)
    html = " ".join(f["html"] for f in frames if f["type"] == "side_done")
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html


async def test_an_answer_naming_its_model_loses_the_battle(scripted_llm):
    await db(scripted_pair, scripted_llm, "Hi! I am alpha-model, nice to meet you.", "Hello.")
    battle = await db(new_battle)
    await run_battle(battle.pk)
    battle = await db(Battle.objects.get, pk=battle.pk)
    assert battle.state == Battle.State.COMPLETE
    text_a = await db(lambda: battle.answers.get(side="a").text)
    leaked = "a" if "alpha-model" in text_a else "b"  # the sides are drawn at random
    assert battle.leaked_sides == leaked and battle.void_reason == ""


async def test_a_configured_identity_word_said_by_both_voids_the_battle(scripted_llm, settings):
    settings.ARENA_IDENTITY_WORDS = ["Acme Labs"]
    await db(scripted_pair, scripted_llm, "I was trained by acme-labs.", "Acme Labs made me.")
    battle = await db(new_battle)
    await run_battle(battle.pk)
    battle = await db(Battle.objects.get, pk=battle.pk)
    assert battle.leaked_sides == "ab" and battle.void_reason


async def test_a_name_inside_a_longer_word_of_the_prompt_still_leaks(scripted_llm):
    """The voter asked about a supernova, not for "Nova": a name the voter wrote is exempt only
    where the voter wrote it as a word, by the rule that finds it in an answer."""

    def pair():
        for name, text in (("Nova", "I am Nova, and a supernova is a star's explosion."),
                           ("beta-model", "A supernova is an exploding star.")):  # fmt: skip
            factories.contestant(name, endpoint=Endpoint(scripted_llm.base_url, name))
            scripted_llm.scripts[name] = Script(text)

    await db(pair)
    battle = await db(new_battle, "Tell me about a supernova.")
    await run_battle(battle.pk)
    battle = await db(Battle.objects.get, pk=battle.pk)
    side_of_nova = await db(lambda: battle.answers.get(contestant__display_name="Nova").side)
    assert battle.state == Battle.State.COMPLETE
    assert battle.leaked_sides == side_of_nova and battle.void_reason == ""


async def test_a_failing_model_fails_the_battle_and_says_so(scripted_llm):
    await db(scripted_pair, scripted_llm, "fine", "")
    scripted_llm.scripts["beta-model"] = Script("", fail_status=503)
    battle = await db(new_battle)
    frames, _ = await run_battle(battle.pk)
    errors = [f["error"] for f in frames if f["type"] == "side_done" and f["error"]]
    assert errors == [SIDE_FAILED]
    assert frames[-1]["votable"] is False
    assert (await db(Battle.objects.get, pk=battle.pk)).state == Battle.State.FAILED


async def test_reopening_a_finished_battle_replays_it_without_generating_again(scripted_llm):
    await db(scripted_pair, scripted_llm, "Once.", "Only once.")
    battle = await db(new_battle)
    await run_battle(battle.pk)
    scripted_llm.scripts["alpha-model"] = Script("Changed!")
    frames, _ = await run_battle(battle.pk)
    assert [f["type"] for f in frames] == ["side_done", "side_done", "battle_done"]
    assert "Changed" not in repr(frames)


async def test_another_voters_battle_is_not_opened(scripted_llm):
    await db(scripted_pair, scripted_llm, "x", "y")
    battle = await db(new_battle)
    frames, connected = await run_battle(battle.pk, voter="stranger")
    assert not connected
    assert (await db(Battle.objects.get, pk=battle.pk)).state == Battle.State.CREATED


async def test_a_model_server_dying_mid_answer_fails_the_battle_and_ends_the_page(scripted_llm):
    await db(scripted_pair, scripted_llm, "fine", "")
    scripted_llm.scripts["beta-model"] = Script("Half an answer and then", cut_after_chars=8)
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    errors = [f["error"] for f in frames if f["type"] == "side_done" and f["error"]]
    assert errors == [SIDE_FAILED]
    assert frames[-1]["type"] == "battle_done" and frames[-1]["votable"] is False
    assert (await db(Battle.objects.get, pk=battle.pk)).state == Battle.State.FAILED
    with pytest.raises(BattleRefused) as refused:
        await db(vote_record, battle_id=battle.pk, choice="a", voter_key=VOTER_KEY, ip_hash="ip")
    assert refused.value.code == "battle_failed"


async def test_a_battle_that_breaks_while_generating_still_ends_the_page(scripted_llm, monkeypatch):
    # Whatever escapes generation (here a stream that raises; in life a database error while
    # storing the answers), the voter gets closing frames instead of "Writing…" forever.
    await db(scripted_pair, scripted_llm, "Alpha answers in full.", "Beta answers in full.")

    async def breaking_stream(endpoint, messages, **options):
        yield TextDelta("Partial")
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr("arena.battles.generation.stream_chat", breaking_stream)
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    closing = [f for f in frames if f["type"] == "side_done"]
    assert {f["side"] for f in closing} == {"a", "b"}
    assert all(f["error"] == "This answer was interrupted." for f in closing)
    assert any("Partial" in f["html"] for f in closing)
    assert frames[-1] == {
        "type": "battle_done",
        "votable": False,
        "message": "A model failed to answer, so this battle cannot be voted on.",
    }
    assert (await db(Battle.objects.get, pk=battle.pk)).state == Battle.State.FAILED
    with pytest.raises(BattleRefused, match="cannot be voted on"):
        await db(vote_record, battle_id=battle.pk, choice="a", voter_key=VOTER_KEY, ip_hash="ip")


def shown_lengths(frames: list[dict], side: str) -> list[int]:
    """How many characters of `side` the page showed after each of its frames."""
    total, lengths = 0, []
    for frame in frames:
        if frame.get("side") == side and frame["type"] == "delta":
            total += len(frame["text"])
            lengths.append(total)
    return lengths


async def test_a_slow_model_and_a_fast_one_are_shown_at_the_same_pace(scripted_llm, settings):
    # Alpha's server writes its answer at once; Beta's takes about a second. Before the vote
    # the page must not tell them apart by speed: both advance together and end together.
    settings.ARENA_STREAM_CHARS_PER_SECOND = 400
    text = "Every word of this answer is as long as the other one here."
    await db(scripted_pair, scripted_llm, text, text.upper())
    scripted_llm.scripts["alpha-model"].delay_s = 0.0
    scripted_llm.scripts["beta-model"].delay_s = 0.07
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    assert shown_lengths(frames, "a") == shown_lengths(frames, "b")
    assert shown_lengths(frames, "a")[-1] == len(text)
    order = [(f["type"], f.get("side")) for f in frames]
    first_a, first_b = order.index(("delta", "a")), order.index(("delta", "b"))
    assert abs(first_a - first_b) == 1  # the first words of both sides appear together
    done_a, done_b = order.index(("side_done", "a")), order.index(("side_done", "b"))
    assert abs(done_a - done_b) == 1  # and both sides end together


async def test_a_shorter_answer_ends_first_whichever_model_is_faster(scripted_llm, settings):
    settings.ARENA_STREAM_CHARS_PER_SECOND = 400
    await db(scripted_pair, scripted_llm, "Short one.", "A much longer answer that keeps on going.")
    scripted_llm.scripts["alpha-model"].delay_s = 0.15  # the short answer's server is slow
    scripted_llm.scripts["beta-model"].delay_s = 0.0
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    # Which side each model answers on is drawn per battle: find the short one by its text.
    short = next(f["side"] for f in frames if f["type"] == "delta" and f["text"][0] == "S")
    long = "b" if short == "a" else "a"
    order = [(f["type"], f.get("side")) for f in frames]
    assert order.index(("side_done", short)) < order.index(("side_done", long))
    assert shown_lengths(frames, short)[-1] == len("Short one.")


async def test_an_answer_of_enormous_tokens_is_cut_and_the_page_still_ends_soon(
    scripted_llm, settings
):
    # An agent controls its tokenizer: 160 tokens of 10,000 characters each is 1.6 MB that the
    # common pace would take hours to show. The answer is cut at ARENA_ANSWER_MAX_CHARS, like
    # one that reached the length limit, and the battle ends within seconds.
    settings.ARENA_STREAM_CHARS_PER_SECOND = 400
    settings.ARENA_ANSWER_MAX_CHARS = 600
    await db(scripted_pair, scripted_llm, "x" * 200_000, "A short answer.")
    scripted_llm.scripts["alpha-model"].chunk_chars = 10_000
    battle = await db(new_battle)

    frames, _ = await run_battle(battle.pk)

    assert frames[-1]["type"] == "battle_done" and frames[-1]["votable"] is True
    long_side = next(f["side"] for f in frames if f["type"] == "delta" and f["text"][0] == "x")
    assert shown_lengths(frames, long_side)[-1] == 600
    stored = await db(
        lambda: Battle.objects.get(pk=battle.pk).answers.get(contestant__display_name="alpha-model")
    )
    assert len(stored.text) == 600 and stored.finish_reason == "length"
