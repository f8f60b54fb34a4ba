import json

import pytest
from django.test import Client

from arena.battles.models import Battle, Vote
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def voter():
    client = Client(enforce_csrf_checks=True)
    page = client.get("/")
    client.csrf = page.cookies["csrftoken"].value
    return client


def post(client, url, body):
    return client.post(
        url, json.dumps(body), content_type="application/json", HTTP_X_CSRFTOKEN=client.csrf
    )


def test_the_arena_page_names_no_contestant_and_forbids_inline_scripts(voter):
    factories.contestant("secret-model-name")
    page = voter.get("/")
    assert page.status_code == 200
    assert b"secret-model-name" not in page.content
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert b"<script>" not in page.content  # only external, same-origin scripts


def test_starting_a_battle_returns_only_an_opaque_id(voter):
    factories.contestant("left-model")
    factories.contestant("right-model")
    reply = post(voter, "/api/battles", {"prompt": "Hello"})
    assert reply.status_code == 201
    body = reply.json()
    assert set(body) == {"battle", "socket"}
    assert body["socket"] == f"/ws/battles/{body['battle']}/"
    assert b"model" not in reply.content


def test_posts_without_the_csrf_token_are_refused(voter):
    reply = voter.post(
        "/api/battles", json.dumps({"prompt": "Hello"}), content_type="application/json"
    )
    assert reply.status_code == 403
    assert not Battle.objects.exists()


def test_a_too_long_prompt_gets_a_clear_message(voter, settings):
    settings.ARENA_PROMPT_MAX_CHARS = 5
    reply = post(voter, "/api/battles", {"prompt": "far too long"})
    assert reply.status_code == 400
    assert reply.json() == {
        "error": "Your prompt is 12 characters long; the limit is 5.",
        "code": "prompt_too_long",
    }


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
def test_malformed_bodies_are_refused_with_a_message(voter, raw):
    reply = voter.post(
        "/api/battles", raw, content_type="application/json", HTTP_X_CSRFTOKEN=voter.csrf
    )
    assert reply.status_code == 400
    assert reply.json()["code"] == "bad_json"


def test_voting_reveals_the_models_and_a_second_vote_is_refused(voter):
    voter_id = voter.session["arena_voter"]
    battle = factories.complete_battle(
        voter=voter_id, a=factories.contestant("left"), b=factories.contestant("right")
    )
    reply = post(voter, f"/api/battles/{battle.pk}/vote", {"choice": "b"})
    assert reply.status_code == 200
    assert reply.json()["reveal"] == {"a": "left", "b": "right"}
    assert reply.json()["counted"] is True
    again = post(voter, f"/api/battles/{battle.pk}/vote", {"choice": "a"})
    assert again.status_code == 409
    assert Vote.objects.get().choice == "b"


def test_a_void_battle_tells_the_voter_it_does_not_count(voter):
    battle = factories.complete_battle(
        voter=voter.session["arena_voter"], void_reason="answer A revealed a model identity"
    )
    reply = post(voter, f"/api/battles/{battle.pk}/vote", {"choice": "a"})
    assert reply.json()["counted"] is False
    assert "does not count" in reply.json()["message"]


def test_someone_elses_battle_cannot_be_voted_on(voter):
    battle = factories.complete_battle(voter="someone-else")
    reply = post(voter, f"/api/battles/{battle.pk}/vote", {"choice": "a"})
    assert reply.status_code == 403
    assert not Vote.objects.exists()


def test_a_suggested_prompt_comes_from_the_pool(voter):
    from arena.battles.services import prompts_load

    prompts_load(texts=["Only this one?"])
    assert voter.get("/api/prompts/suggest").json() == {"prompt": "Only this one?"}
