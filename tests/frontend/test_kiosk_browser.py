"""A booth session in a real browser (Debian's Chromium driven by Playwright) against the arena
in daphne: enrol the screen, vote, see the reveal, and find the screen cleared for a new voter."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from arena.battles.kiosks import kiosk_register
from arena.battles.models import Battle, Vote
from arena.serving.client import Endpoint
from tests import factories
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow


def battle_in_kiosk(page, prompt: str) -> None:
    page.fill("#prompt", prompt)
    page.click("#send")
    expect(page.locator("#shown-prompt")).to_have_text(prompt)
    expect(page.locator("#notice")).to_be_hidden()
    expect(page.locator("#status-a")).to_contain_text("Done", timeout=60_000)
    expect(page.locator("#status-b")).to_contain_text("Done", timeout=60_000)


def test_a_kiosk_session_votes_sees_the_reveal_and_clears_for_a_new_voter(
    arena, scripted_llm, browser: Browser, page
):
    scripted_llm.scripts["kiosk-left"] = Script("Four, since two plus two is four.")
    scripted_llm.scripts["kiosk-right"] = Script("It is 4.")
    factories.contestant("Left Model", endpoint=Endpoint(scripted_llm.base_url, "kiosk-left"))
    factories.contestant("Right Model", endpoint=Endpoint(scripted_llm.base_url, "kiosk-right"))

    # A screen nobody registered is told so.
    stranger = browser.new_context().new_page()
    refused = stranger.goto(f"{arena.url}/kiosk")
    assert refused is not None and refused.status == 403
    expect(stranger.locator("h1")).to_contain_text("not a registered kiosk")
    stranger.context.close()

    # The organizer's one-time link, opened on the booth's screen.
    enrolment = kiosk_register(name="booth-1")
    page.goto(f"{arena.url}/kiosk/enrol/{enrolment.enrolment_token}")
    page.click("#enrol")
    expect(page).to_have_url(f"{arena.url}/kiosk")
    expect(page.locator("body.kiosk")).to_be_visible()
    qr = page.locator(".kiosk-qr img")
    expect(qr).to_be_visible()
    assert page.evaluate("(img) => img.naturalWidth", qr.element_handle()) > 0, "QR drawn"
    assert page.locator("a").count() == 0, "no way off the kiosk's page"
    send = page.locator("#send")
    assert send.bounding_box()["height"] >= 64, "touch-sized buttons"

    battle_in_kiosk(page, "What is 2 plus 2?")
    vote_button = page.get_by_role("button", name="A is better")
    expect(vote_button).to_be_enabled()
    assert vote_button.bounding_box()["height"] >= 64, "touch-sized vote buttons"
    vote_button.click()
    expect(page.locator("#result-message")).to_contain_text("Your vote counts")
    revealed = {page.inner_text("#reveal-a"), page.inner_text("#reveal-b")}
    assert {name.strip("— ") for name in revealed} == {"Left Model", "Right Model"}

    # After the reveal's few seconds, a cleared screen, ready for the next person.
    expect(page.locator("#battle")).to_be_hidden(timeout=30_000)
    expect(page.locator("#prompt")).to_have_value("")
    for cleared in ("#reveal-a", "#reveal-b", "#body-a", "#body-b", "#shown-prompt"):
        expect(page.locator(cleared)).to_have_text("")

    battle_in_kiosk(page, "Name a colour.")
    expect(page.locator("#result")).to_be_hidden()
    first, second = Battle.objects.order_by("created_at")
    assert first.kiosk.name == second.kiosk.name == "booth-1"
    assert first.voter_key != second.voter_key, "two people at the booth, two voter identities"
    assert Vote.objects.get().battle_id == first.pk
    assert re.fullmatch(r"[0-9a-f]{32}", second.voter_key)
