"""A vote cast in one browser shows up on a live-leaderboard screen open in another."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from arena.serving.client import Endpoint
from tests import factories
from tests.frontend.test_browser import ask, wait_for_both_answers
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow


def test_a_vote_reaches_an_open_live_leaderboard_within_two_seconds(arena, scripted_llm, browser):
    scripted_llm.scripts["screen-one"] = Script("A brief answer.")
    scripted_llm.scripts["screen-two"] = Script("An answer with **bold** words.")
    factories.contestant("alpha-screen", endpoint=Endpoint(scripted_llm.base_url, "screen-one"))
    factories.contestant("beta-screen", endpoint=Endpoint(scripted_llm.base_url, "screen-two"))

    screen = browser.new_context().new_page()
    screen.goto(f"{arena.url}/leaderboard/live")
    expect(screen.locator("#connection")).to_have_text("live")
    expect(screen.locator("#rows")).to_contain_text("Waiting for the first votes")

    voter = browser.new_context().new_page()
    ask(voter, arena.url, "Who answers better?")
    wait_for_both_answers(voter)
    vote_button = voter.get_by_role("button", name="A is better")
    expect(vote_button).to_be_enabled()
    vote_button.click()
    expect(voter.locator("#result")).to_be_visible()
    voted_at = time.monotonic()

    expect(screen.locator("#rows tr[data-model]")).to_have_count(2, timeout=2000)
    latency = time.monotonic() - voted_at
    print(f"[live leaderboard] vote visible on the screen after {latency:.2f} s")
    winner = voter.inner_text("#reveal-a").strip("— ")
    expect(screen.locator("#rows tr[data-model]").first).to_have_attribute("data-model", winner)
    expect(screen.locator("#battles")).to_have_text("1 counted battles")

    screen.get_by_role("button", name="Raw").click()
    expect(screen.locator("#rows tr[data-model]")).to_have_count(2)
    screen.context.close()
    voter.context.close()
