"""End to end in a real browser (Debian's Chromium driven by Playwright) against the arena
running in daphne, PostgreSQL, the Redis channel layer and real `transformers serve` models."""

from __future__ import annotations

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, Response, expect

from arena.battles.models import Answer, Battle, Vote
from tests import factories
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow


class Recorder:
    """Every byte the browser receives: response headers and bodies, and WebSocket frames.

    A body Playwright cannot hand over (a redirect has none) is listed in `unreadable` with
    the reason, so a blindness check can insist that what matters was actually read.
    """

    def __init__(self, page: Page) -> None:
        self.responses: list[Response] = []
        self.frames: list[str] = []
        self.urls: list[str] = []
        self.bodies: dict[str, str] = {}  # url -> body of the last response from it
        self.unreadable: dict[str, str] = {}  # url -> why its body could not be read
        page.on("response", lambda response: self.responses.append(response))
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("websocket", self._socket)

    def _socket(self, socket) -> None:
        self.urls.append(socket.url)
        socket.on("framereceived", lambda payload: self.frames.append(str(payload)))

    def everything(self) -> str:
        parts = [*self.urls, *self.frames]
        for response in self.responses:
            parts.append(response.url)
            parts.extend(f"{name}: {value}" for name, value in response.all_headers().items())
            try:
                body = response.body().decode("utf-8", "replace")
            except PlaywrightError as error:
                self.unreadable[response.url] = str(error).splitlines()[0]
                continue
            self.bodies[response.url] = body
            parts.append(body)
        return "\n".join(parts)

    def assert_read(self, *urls: str) -> None:
        for url in urls:
            assert url in self.bodies, (
                f"the body of {url} was not read: {self.unreadable.get(url, 'never received')}"
            )


def ask(page: Page, arena_url: str, prompt: str) -> None:
    page.goto(arena_url)
    page.fill("#prompt", prompt)
    page.click("#send")


def wait_for_both_answers(page: Page) -> None:
    expect(page.locator("#status-a")).to_contain_text("Done", timeout=60_000)
    expect(page.locator("#status-b")).to_contain_text("Done", timeout=60_000)


def test_a_voter_battles_two_real_models_votes_and_sees_who_they_were(arena, model_servers, page):
    contestants = {
        name: factories.contestant(f"tiny-{name}", endpoint=endpoint)
        for name, endpoint in model_servers.items()
    }
    recorder = Recorder(page)

    ask(page, arena.url, "What is 2 plus 3?")
    wait_for_both_answers(page)

    deltas = [f for f in recorder.frames if '"delta"' in f]
    per_side = [sum(f'"side": "{side}"' in f for f in deltas) for side in "ab"]
    assert min(per_side) >= 1, "both answers arrive as text before they are done"
    # Both sides are released at one pace (20 characters a tick here), not in one piece.
    assert max(per_side) > 1, "answers arrive piece by piece, not in one piece"
    vote_a = page.get_by_role("button", name="A is better")
    expect(vote_a).to_be_enabled()

    # Blindness: nothing received before the vote names a contestant, its server or its files.
    received = recorder.everything()
    recorder.assert_read(f"{arena.url}/", f"{arena.url}/api/battles")
    assert '"battle"' in recorder.bodies[f"{arena.url}/api/battles"]
    assert any('"battle_done"' in frame for frame in recorder.frames), "frames were recorded"
    for contestant in contestants.values():
        for secret in (contestant.display_name, contestant.base_url, contestant.served_model_name):
            assert secret not in received, f"{secret!r} reached the browser before the vote"
    assert str(model_servers["base"].base_url.split(":")[-1].split("/")[0]) not in received.replace(
        arena.url, ""
    )

    vote_a.click()
    expect(page.locator("#result")).to_be_visible()
    expect(page.locator("#result-message")).to_contain_text("Your vote counts")
    revealed = {page.inner_text("#reveal-a").strip("— "), page.inner_text("#reveal-b").strip("— ")}
    battle = Battle.objects.get()
    shown = {a.contestant.display_name for a in battle.answers.select_related("contestant")}
    assert revealed == shown and len(shown) == 2
    assert Vote.objects.get(battle=battle).choice == "a"
    for answer in Answer.objects.filter(battle=battle):
        assert answer.text, "both answers were stored"
        assert answer.first_token_ms is not None and answer.total_ms is not None
        print(
            f"[latency] {answer.contestant.display_name}: first token {answer.first_token_ms} ms, "
            f"full answer {answer.total_ms} ms, {answer.tokens} tokens, {answer.finish_reason}"
        )
    expect(vote_a).to_be_disabled()

    # Voting again on the same battle is refused; retrying the same vote changes nothing.
    second = page.evaluate(
        """async (id) => {
            const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
            const send = (choice) => fetch(`/api/battles/${id}/vote`, {method: "POST",
                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
                body: JSON.stringify({choice})}).then(r => r.status);
            return [await send("b"), await send("a")];
        }""",
        battle.pk,
    )
    assert second == [409, 200]
    assert Vote.objects.count() == 1

    page.click("#new-battle")
    expect(page.locator("#battle")).to_be_hidden()
    expect(page.locator("#prompt")).to_have_value("")


def test_a_script_in_an_answer_is_inert_and_a_self_naming_answer_loses_the_battle(
    arena, scripted_llm, page
):
    hostile = (
        "Look: <script>window.__pwned = 1</script>"
        '<img src=x onerror="window.__pwned = 2"> and [a link](javascript:window.__pwned=3) **bold**'
    )
    scripted_llm.scripts["hostile"] = Script(hostile)
    scripted_llm.scripts["narcissus"] = Script("Hello! I am Narcissus, the best model here.")
    from arena.serving.client import Endpoint

    factories.contestant("hostile", endpoint=Endpoint(scripted_llm.base_url, "hostile"))
    factories.contestant("Narcissus", endpoint=Endpoint(scripted_llm.base_url, "narcissus"))

    ask(page, arena.url, "Say something")
    wait_for_both_answers(page)

    assert page.evaluate("window.__pwned") is None
    assert page.locator("a[href^='javascript']").count() == 0
    hostile_side = "a" if "window.__pwned" in page.inner_text("#body-a") else "b"
    body = page.locator(f"#body-{hostile_side}")
    assert "<script>window.__pwned = 1</script>" in body.inner_text()  # shown as text
    assert body.locator("script, img").count() == 0
    assert body.locator("strong").inner_text() == "bold"  # markdown still rendered

    page.get_by_role("button", name="Tie").click()
    expect(page.locator("#result-message")).to_contain_text("counts as a loss")
    vote = Vote.objects.get()
    assert vote.counted is True and vote.battle.void_reason == ""
    assert vote.battle.leaked_sides == ("b" if hostile_side == "a" else "a")
