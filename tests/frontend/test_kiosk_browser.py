"""A booth session in a real browser (Debian's Chromium driven by Playwright) against the arena
in daphne: enrol the screen, vote, see the reveal, and find the screen cleared for a new voter."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator

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


class _AgentsPage(http.server.BaseHTTPRequestHandler):
    """The page a contestant's answer links to: it records every request it gets."""

    requested: list[str] = []

    def do_GET(self) -> None:
        type(self).requested.append(self.path)
        body = b"<h1>the agent's page</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def agents_page() -> Iterator[str]:
    _AgentsPage.requested = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AgentsPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answers_links_cannot_take_the_kiosk_off_the_arena(
    arena, scripted_llm, page, agents_page
):
    """Issue 25, finding 6: a contestant's answer with a link of every kind Markdown has. The
    voter sees the links' text and addresses as plain text; a tap on them, or on any link that
    reaches the page, leaves the booth where it is, on the kiosk with its idle reset."""
    answer = (
        f"Read [the guide]({agents_page}/inline), or <{agents_page}/auto>, or "
        f'<a href="{agents_page}/raw">the raw one</a>, or [the reference][ref].\n\n'
        f"[ref]: {agents_page}/reference\n"
    )
    for side in ("links-left", "links-right"):
        scripted_llm.scripts[side] = Script(answer)
        factories.contestant(side, endpoint=Endpoint(scripted_llm.base_url, side))
    enrolment = kiosk_register(name="booth-links")
    page.goto(f"{arena.url}/kiosk/enrol/{enrolment.enrolment_token}")
    page.click("#enrol")
    kiosk = f"{arena.url}/kiosk"
    expect(page).to_have_url(kiosk)

    battle_in_kiosk(page, "Where can I read more?")
    answer_a = page.locator("#body-a")
    expect(answer_a).to_contain_text("the guide")
    assert page.locator("#body-a a, #body-b a").count() == 0, "an answer rendered a link"
    shown = answer_a.inner_text()
    assert f"the guide ({agents_page}/inline)" in shown
    assert f"{agents_page}/auto" in shown and f"{agents_page}/reference" in shown
    assert "the raw one" in shown

    # Playwright's click waits for a navigation it started: the URL below is the outcome.
    for text in ("the guide", f"{agents_page}/auto", "the raw one", "the reference"):
        answer_a.get_by_text(text).first.click()
        assert page.url == kiosk, f"a tap on {text!r} left the kiosk"
    # Any link that reaches the page anyway (a renderer's mistake, a future feature).
    page.evaluate(
        """(href) => {
            const link = document.createElement("a");
            link.href = href; link.id = "planted"; link.textContent = "planted";
            document.getElementById("body-b").append(link);
        }""",
        f"{agents_page}/planted",
    )
    page.click("#planted")
    assert page.url == kiosk, "a link that reached the page took the kiosk off the arena"
    expect(page.locator("body.kiosk")).to_be_visible()
    assert _AgentsPage.requested == [], "the booth's browser fetched the agent's page"
