"""A follow-up's answers on the battle socket, and the follow-up endpoint."""

import json

import pytest
from django.test import Client

from arena.battles.models import Battle, FollowUpAnswer
from arena.battles.services import follow_up_create
from tests import factories
from tests.frontend.test_battle_socket import (
    VOTER,
    VOTER_KEY,
    db,
    new_battle,
    run_battle,
    scripted_pair,
)
from tests.support.scripted_llm import Script


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_follow_ups_answers_stream_with_their_turn_and_each_model_sees_its_own_history(
    scripted_llm, settings
):
    settings.ARENA_MIN_VOTE_SECONDS = 0.0
    await db(scripted_pair, scripted_llm, "", "")
    # Each model says whose earlier answer it was sent: its own, the other's, or none.
    scripted_llm.scripts["alpha-model"] = Script(
        "one first", when_asked={"two first": "ONE SAW TWO", "one first": "one remembers"}
    )
    scripted_llm.scripts["beta-model"] = Script(
        "two first", when_asked={"one first": "TWO SAW ONE", "two first": "two remembers"}
    )
    battle = await db(new_battle)
    first, _ = await run_battle(battle.pk)
    assert first[-1]["votable"] is True
    assert all("turn" not in frame for frame in first)  # a first turn's frames are unchanged

    await db(
        follow_up_create, battle_id=battle.pk, prompt="And then?", voter_key=VOTER_KEY, ip_hash="i"
    )
    second, _ = await run_battle(battle.pk)

    answers = [f for f in second if f["type"] in {"delta", "side_done"}]
    assert answers and all(f["turn"] == 2 for f in answers)
    assert second[-1]["type"] == "battle_done" and second[-1]["votable"] is True
    stored = await db(
        lambda: sorted(
            FollowUpAnswer.objects.filter(follow_up__battle_id=battle.pk).values_list(
                "text", flat=True
            )
        )
    )
    assert stored == ["one remembers", "two remembers"]
    for secret in ("alpha-model", "beta-model", scripted_llm.base_url):
        assert secret not in repr(first + second)

    replay, _ = await run_battle(battle.pk)
    assert [(f["type"], f.get("turn", 1)) for f in replay] == [
        ("side_done", 1),
        ("side_done", 1),
        ("side_done", 2),
        ("side_done", 2),
        ("battle_done", 1),
    ]


@pytest.mark.django_db
def test_the_follow_up_endpoint_opens_the_next_turn_and_refuses_over_the_limit(settings):
    settings.ARENA_MIN_VOTE_SECONDS = 0.0
    settings.ARENA_MAX_TURNS = 2
    client = Client(enforce_csrf_checks=True)
    csrf = client.get("/").cookies["csrftoken"].value
    session = client.session
    session["arena_voter"] = VOTER
    session.save()
    battle = factories.complete_battle(voter=VOTER)

    def send(prompt: str):
        return client.post(
            f"/api/battles/{battle.pk}/turns",
            json.dumps({"prompt": prompt}),
            content_type="application/json",
            HTTP_X_CSRFTOKEN=csrf,
        )

    reply = send("Tell me more.")
    assert reply.status_code == 201
    assert reply.json() == {
        "battle": battle.pk,
        "turn": 2,
        "socket": f"/ws/battles/{battle.pk}/",
    }
    assert Battle.objects.get(pk=battle.pk).state == Battle.State.CREATED
    Battle.objects.filter(pk=battle.pk).update(state=Battle.State.COMPLETE)
    refused = send("And more.")
    assert refused.status_code == 409 and refused.json()["code"] == "turn_limit"
