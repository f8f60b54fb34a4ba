"""A three-turn battle in a real browser (Debian's Chromium driven by Playwright) against the
arena in daphne: two follow-ups to both anonymous models, answers side by side per turn,
nothing identifying before the vote, then the vote and the reveal."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from arena.battles.models import Battle, FollowUpAnswer, Vote
from arena.serving.client import Endpoint
from tests import factories
from tests.frontend.test_browser import Recorder, ask
from tests.support.scripted_llm import Script

pytestmark = pytest.mark.slow


def both_done(page, turn: int) -> None:
    suffix = f"-{turn}" if turn > 1 else ""
    for side in "ab":
        expect(page.locator(f"#status-{side}{suffix}")).to_have_text("Done.", timeout=60_000)


def test_a_voter_continues_a_battle_for_three_turns_then_votes_and_sees_who_they_were(
    arena, scripted_llm, page
):
    # Each model answers its turns in order; the words say which model and which turn without
    # naming it, so the page can be checked to put each answer in its side's column.
    for served in ("orion-served", "vega-served"):
        tag = served.split("-")[0][::-1]  # "noiro", "agev": not a name the arena knows
        scripted_llm.scripts[served] = Script(
            "", replies=tuple(f"Answer {n} from {tag}." for n in (1, 2, 3))
        )
    contestants = [
        factories.contestant("Orion 7B", endpoint=Endpoint(scripted_llm.base_url, "orion-served")),
        factories.contestant("Vega 2", endpoint=Endpoint(scripted_llm.base_url, "vega-served")),
    ]
    recorder = Recorder(page)

    ask(page, arena.url, "Name a prime number.")
    both_done(page, 1)
    follow_up_form = page.locator("#follow-up-form")
    expect(follow_up_form).to_be_visible()
    expect(page.locator("#follow-up-left")).to_contain_text("2 more questions")
    tags = {side: page.inner_text(f"#body-{side}").split()[-1] for side in "ab"}
    assert sorted(tags.values()) == ["agev.", "noiro."]

    for turn, prompt in ((2, "A bigger one?"), (3, "Is it odd?")):
        page.fill("#follow-up", prompt)
        page.click("#send-follow-up")
        expect(page.locator(f"#turn-{turn} .turn-prompt")).to_have_text(prompt)
        both_done(page, turn)
        for side in "ab":  # each side's answer under its own column, in its own turn
            expect(page.locator(f"#body-{side}-{turn}")).to_have_text(
                f"Answer {turn} from {tags[side]}"
            )
    expect(follow_up_form).to_be_hidden()  # three prompts: the limit
    vote_b = page.get_by_role("button", name="B is better")
    expect(vote_b).to_be_enabled()

    # Blindness over all three turns: nothing received so far names a model or its server.
    received = recorder.everything()
    recorder.assert_read(f"{arena.url}/", f"{arena.url}/api/battles")
    turns_url = f"{arena.url}/api/battles/{Battle.objects.get().pk}/turns"
    recorder.assert_read(turns_url)
    assert sum(r.url == turns_url for r in recorder.responses) == 2, "both follow-ups replied"
    assert sum('"turn": 3' in frame for frame in recorder.frames) >= 2, "turn 3 was streamed"
    for contestant in contestants:
        for secret in (contestant.display_name, contestant.served_model_name, "orion", "vega"):
            assert not re.search(re.escape(secret), received, re.IGNORECASE), (
                f"{secret!r} reached the browser before the vote"
            )

    vote_b.click()
    expect(page.locator("#result-message")).to_contain_text("Your vote counts")
    battle = Battle.objects.get()
    names = {a.side: a.contestant.display_name for a in battle.answers.select_related("contestant")}
    for side in "ab":
        expect(page.locator(f"#reveal-{side}")).to_have_text(f"— {names[side]}")
    assert battle.turns == 3 and Vote.objects.get(battle=battle).choice == "b"
    assert FollowUpAnswer.objects.filter(follow_up__battle=battle).count() == 4
    # The vote closed the battle: no follow-up form, and the server refuses one.
    expect(follow_up_form).to_be_hidden()
    status = page.evaluate(
        """async (id) => {
            const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
            const reply = await fetch(`/api/battles/${id}/turns`, {method: "POST",
                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
                body: JSON.stringify({prompt: "one more"})});
            return reply.status;
        }""",
        battle.pk,
    )
    assert status == 409
