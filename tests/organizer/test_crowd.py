"""The simulated crowd: its preference, its bounds, and votes cast through the real site."""

from __future__ import annotations

import time

import pytest
from django.core.management import CommandError, call_command

from arena.battles.models import Battle, Vote
from frontend.crowd import (
    CrowdRefused,
    answer_score,
    crowd_run,
    loopback_url,
    preferred_choice,
    reads_finished,
)
from tests import factories

PROMPTS = ["What is the capital of France?", "Name three colours.", "Say hello politely."]


def test_a_clean_ending_beats_a_cut_off_answer():
    clean = answer_score(prompt="Name three colours", text="Red.")
    cut_off = answer_score(prompt="Name three colours", text="Red blue")
    assert preferred_choice(clean, cut_off) == "a"
    assert preferred_choice(cut_off, clean) == "b"


def test_an_answer_is_judged_finished_by_how_it_reads():
    # What the tiny models write: the instruct model stops after a sentence, the base model
    # runs on to the length limit, mid-word or mid-sentence.
    for text in ("2 plus 3 is 5.", "Here are two birds: robin and owl.", "Is it?\n", "`x`"):
        assert reads_finished(text), text
    for text in ("A cherry is red. A b", "The opposite of", "- The sea is **salty**.\n- The"):
        assert not reads_finished(text), text


def test_sharing_the_prompts_words_breaks_a_tie_between_clean_answers():
    prompt = "Which planet is largest?"
    on_topic = answer_score(prompt=prompt, text="The largest planet is Jupiter.")
    off_topic = answer_score(prompt=prompt, text="I like tea.")
    assert preferred_choice(off_topic, on_topic) == "b"


def test_indistinguishable_answers_are_a_tie_and_two_failures_are_both_bad():
    same = answer_score(prompt="Hi there", text="Hello.")
    assert preferred_choice(same, same) == "tie"
    broken = answer_score(prompt="Hi there", text="", error="model failed")
    cut_off = answer_score(prompt="Hi there", text="zzz")
    assert preferred_choice(broken, cut_off) == "bothbad"


@pytest.mark.parametrize(
    "url",
    ["http://example.com:8000", "http://10.0.0.5:8000", "http://192.168.1.1", "https://127.0.0.1"],
)
def test_a_url_that_is_not_plain_http_on_loopback_is_refused(url):
    with pytest.raises(CrowdRefused):
        crowd_run(url=url, voters=1, battles=1)
    with pytest.raises(CommandError):
        call_command("crowd", "--url", url, "--voters", "1", "--battles", "1")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/", "http://localhost:9", "http://[::1]:80"])
def test_loopback_urls_are_accepted(url):
    assert loopback_url(url) == url.rstrip("/")


@pytest.mark.slow
def test_the_crowd_votes_through_the_site_and_prefers_the_model_that_stops(arena, model_servers):
    factories.contestant("tiny-base", endpoint=model_servers["base"])  # never learnt to stop
    factories.contestant("tiny-instruct", endpoint=model_servers["instruct"])
    progress: list[tuple[int, int]] = []

    report = crowd_run(
        url=arena.url,
        voters=3,
        battles=12,
        seed=7,
        max_seconds=120,
        progress=lambda done, target: progress.append((done, target)),
        prompts=PROMPTS,
    )

    assert report.errors == [] and report.stopped_by == "battles"
    assert Battle.objects.count() == 12  # the bound, exactly
    assert Battle.objects.values("voter_key").distinct().count() == 3  # one session per voter
    recorded = {v.battle_id: v.choice for v in Vote.objects.all()}
    assert len(report.votes) >= 10
    assert recorded == {v.battle_id: v.choice for v in report.votes}
    assert progress[-1] == (len(report.votes), 12)
    # The crowd sees no finish reason, only text: the instruct model's answers read as
    # finished, the base model's mostly not (it can happen to be cut off after a sentence).
    finished = [(v.reveal[s], v.finished[s]) for v in report.votes for s in ("a", "b")]
    assert all(done for model, done in finished if model == "tiny-instruct")
    base = [done for model, done in finished if model == "tiny-base"]
    assert sum(base) <= len(base) / 2
    wins = report.decisive_wins()
    assert wins["tiny-instruct"] >= 0.75 * sum(wins.values()), report.summary()


@pytest.mark.slow
def test_the_crowd_stops_when_its_time_is_up(arena, model_servers):
    factories.contestant("tiny-base", endpoint=model_servers["base"])
    factories.contestant("tiny-instruct", endpoint=model_servers["instruct"])
    started = time.monotonic()

    report = crowd_run(url=arena.url, voters=2, battles=1000, max_seconds=3, prompts=PROMPTS)

    assert time.monotonic() - started < 3 + 10
    assert report.stopped_by == "time"
    assert report.battles_started < 1000
    assert Battle.objects.count() == report.battles_started
    assert Vote.objects.count() == len(report.votes)


@pytest.mark.slow
def test_the_command_prints_progress_and_a_summary(arena, model_servers, capsys):
    factories.contestant("tiny-base", endpoint=model_servers["base"])
    factories.contestant("tiny-instruct", endpoint=model_servers["instruct"])

    call_command("crowd", "--url", arena.url, "--voters", "2", "--battles", "4", "--every", "2")

    out = capsys.readouterr().out
    assert "2/4" in out and "4/4" in out
    assert "4 votes from 2 voters" in out
    assert Vote.objects.count() == 4
