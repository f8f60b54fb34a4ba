"""`GET /api/v1/evals`: an agent sees its own proxy-benchmark scores, never held-out ones
(nor safety ones) until the competition has ended."""

import json

import pytest
from django.test import Client
from django.urls import path

from agents.services import agent_create, token_issue
from arena import api_v1
from evalsuite.models import EvalRun
from tests.evalsuite.conftest import stored_run
from tests.factories import eval_run, running_phase

urlpatterns = [path("api/v1/", api_v1.urls)]

HELD_OUT = {"mmlu-pro": 0.7771, "gpqa": 0.4441, "strongreject": 0.8881}
PROXY = {"mmlu": 0.6111, "gsm8k": 0.5111}

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


@pytest.fixture
def phase():
    phase = running_phase()
    stored_run(phase, EvalRun.Role.BASE, {"mmlu": 0.2, "gsm8k": 0.1, "mmlu-pro": 0.1234,
                                          "strongreject": 0.9})  # fmt: skip
    stored_run(phase, EvalRun.Role.INSTRUCT, {"mmlu": 0.8, "gsm8k": 0.9, "mmlu-pro": 0.9876})
    return phase


def get(agent):
    token = token_issue(agent=agent, kind="api")
    return Client().get("/api/v1/evals", headers={"Authorization": f"Bearer {token}"})


def test_an_agent_sees_its_proxy_scores_and_gap_closed_over_them(phase):
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {**PROXY, **HELD_OUT}, agent=alice, label="alice-1")
    reply = get(alice)
    assert reply.status_code == 200
    body = reply.json()
    (checkpoint,) = body["checkpoints"]
    assert {b["benchmark"]: b["score"] for b in checkpoint["benchmarks"]} == PROXY
    assert body["held_out_visible"] is False
    # gsm8k (0.5111 − 0.1) / 0.8 and mmlu (0.6111 − 0.2) / 0.6
    assert checkpoint["gap_closed"]["per_benchmark"] == {"gsm8k": 0.5139, "mmlu": 0.6852}
    assert body["references"]["base"] == {"gsm8k": 0.1, "mmlu": 0.2}


def test_held_out_scores_appear_nowhere_in_the_response_until_the_competition_ends(phase):
    alice = agent_create(name="alice")
    stored_run(phase, EvalRun.Role.AGENT, {**PROXY, **HELD_OUT}, agent=alice, label="alice-1")
    text = get(alice).content.decode()
    for name, score in {**HELD_OUT, "mmlu-pro-base": 0.1234, "mmlu-pro-instruct": 0.9876}.items():
        assert name.removesuffix("-base").removesuffix("-instruct") not in text
        assert str(score) not in text
    assert "safety" not in text

    phase.competition.phases.update(state="closed")
    body = get(alice).json()
    shown = {b["benchmark"] for b in body["checkpoints"][0]["benchmarks"]}
    assert body["held_out_visible"] is True and set(HELD_OUT) <= shown


def test_an_agent_sees_only_its_own_runs(phase):
    alice, bob = agent_create(name="alice"), agent_create(name="bob")
    stored_run(phase, EvalRun.Role.AGENT, {"mmlu": 0.9999}, agent=bob, label="bob-1")
    body = get(alice).json()
    assert body["checkpoints"] == [] and "0.9999" not in json.dumps(body)


def test_the_endpoint_needs_an_api_token():
    reply = Client().get("/api/v1/evals")
    assert reply.status_code == 401
    other = Client().post("/api/v1/evals")
    assert other.status_code in (401, 405)


def test_an_agent_is_told_no_benchmark_qualifies_where_instruct_is_below_base():
    import datetime as dt

    from django.utils import timezone

    from tests.organizer import builders

    phase = running_phase()
    # instruct below the base on gsm8k: an agent as bad as instruct regressed, it closed nothing
    stored_run(phase, EvalRun.Role.BASE, {"gsm8k": 0.6})
    stored_run(phase, EvalRun.Role.INSTRUCT, {"gsm8k": 0.0})
    zed = builders.agent("zed")
    at = timezone.now() - dt.timedelta(hours=1)
    checkpoint = builders.checkpoint(zed, job=builders.job(zed, submitted=at), at=at)
    eval_run(phase, EvalRun.Role.AGENT, {"gsm8k": 0.0}, agent=zed, checkpoint=checkpoint,
             stderr=0.01, n=5)  # fmt: skip
    body = get(zed).json()
    (shown,) = body["checkpoints"]
    assert shown["gap_closed"]["median"] is None
    assert shown["gap_closed"]["no_median"] == "no benchmark where instruct beats base"
    assert shown["gap_closed"]["excluded_reasons"] == {
        "gsm8k": "instruct not above base: 0.000 vs 0.600"
    }
    progress = body["progress"]
    assert progress["headlines"] == {} and progress["post_peak"] is None
    assert progress["without_headline"] == {
        str(checkpoint.pk): "no benchmark where instruct beats base"
    }
