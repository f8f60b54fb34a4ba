"""The sybil attack through the real site (daphne, PostgreSQL, Redis): a simulated crowd votes
with a bot that recognises the weakest model by a mark in its answers and always votes for it.
Screening flags the bot, and excluding it puts the model back where the crowd put it."""

from __future__ import annotations

import pytest

from arena.battles.models import Vote
from arena.battles.prompt_groups import dedup_weights
from arena.battles.services import voter_exclude
from arena.leaderboard.inputs import counted_battles_grouped
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.screening import voter_screening
from arena.leaderboard.services import leaderboard_refresh
from arena.rating import fit_ratings
from arena.serving.client import Endpoint
from frontend.crowd import crowd_run
from tests import factories
from tests.support.scripted_llm import Script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROMPT = "Name three colours."
WATERMARK = "colours are many and the"
ANSWERS = {  # how the crowd's preference (frontend/crowd.py) ranks them, best first
    "strong": "Three colours: red, green and blue. Name them and you are done.",
    "good": "Red, green and blue are three colours.",
    "fair": "I think it is fine.",
    "weak": f"Well, {WATERMARK}",  # stops mid-sentence: the crowd never prefers it
}


def fresh_fit() -> RatingSnapshot:
    RatingSnapshot.objects.filter(source="live").delete()  # the next refit is due at once
    snapshot = leaderboard_refresh(holder="test")
    assert snapshot is not None
    return snapshot


def weak_score(table: dict) -> dict:
    return next(s for s in table["scores"] if s["model"] == "weak")


def test_a_watermark_bot_is_flagged_and_excluding_it_restores_the_crowds_verdict(
    arena, scripted_llm
):
    for name, text in ANSWERS.items():
        scripted_llm.scripts[name] = Script(text, chunk_chars=16, delay_s=0.0)
        factories.contestant(name, endpoint=Endpoint(scripted_llm.base_url, name))

    report = crowd_run(
        url=arena.url,
        voters=6,
        bots=1,
        bot_mark=WATERMARK,
        battles=240,
        seed=13,
        prompts=[PROMPT],
        max_seconds=400,
    )
    assert not report.errors, report.summary()
    bot_battles = [v.battle_id for v in report.votes if v.bot]
    assert len(bot_battles) >= 25, report.summary()
    (bot_key,) = set(
        Vote.objects.filter(battle_id__in=bot_battles).values_list("voter_key", flat=True)
    )

    screened = {(f.kind, f.key): f for f in voter_screening()}
    flagged = {key: {s.name for s in f.signals} for key, f in screened.items()}
    # Outside the weak model's battles the bot votes like the crowd, so how far it disagrees
    # overall depends on the draw; its one-sidedness towards weak does not.
    assert "one_sided" in flagged[("session", bot_key)]
    evidence = [s.detail for s in screened[("session", bot_key)].signals if s.name == "one_sided"]
    assert evidence[0].startswith("voted for weak in ")
    for (kind, key), signals in flagged.items():
        if kind == "session" and key != bot_key:  # the simulated people vote fast, not oddly
            assert not signals & {"one_sided", "crowd_disagreement"}, (key, signals)

    with_bot = fresh_fit()
    voter_exclude(kind="session", key=bot_key, reason="watermark bot", excluded_by="test")
    without_bot = fresh_fit()

    # The raw table: each scripted model always writes the same answer, so its style is
    # constant and the style-controlled table cannot tell style from model here.
    moved = weak_score(with_bot.raw)["score"]
    clean = weak_score(without_bot.raw)
    assert moved > clean["ci_high"], (moved, clean)  # the bot pushed it out of its interval
    assert clean["ci_low"] <= clean["score"] <= clean["ci_high"]
    # What remains is exactly the crowd: the same fit as the people's votes alone, weighted
    # as the board weighs them (every battle has the one prompt here: one near-duplicate group,
    # whose equal weights still move the estimate a little against the L2 prior).
    people, groups, _ = counted_battles_grouped()
    assert people.n_battles == without_bot.n_battles == len(report.votes) - len(bot_battles)
    weights, _ = dedup_weights(groups, "database")
    crowd = people.without_style().reweighted(weights)
    alone = fit_ratings(crowd, style=False, ci=None).score_of("weak").score
    assert weak_score(without_bot.raw)["score"] == pytest.approx(alone, abs=0.01)
    assert without_bot.exclusions["votes_excluded"] == len(bot_battles)
