"""The phase engine: each transition exactly once whatever runs it, nominations closing to the
second, budgets changing at the phase boundary, and each agent's feedback its own."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.models import Checkpoint
from agents.sandboxes import UnixSandboxes
from agents.services import (
    RegistrationRefused,
    agent_deprovision,
    agent_provision,
    nomination_set,
    token_issue,
)
from arena.battles.models import Battle
from arena.battles.services import vote_record
from arena.competition.models import Phase
from arena.phases.models import FeedbackBundle, PhaseContestant, PhaseTransition
from arena.phases.services import Engine, competition_plan, phases_tick
from cluster.backends.local import LocalBackend
from cluster.models import ClusterAccount, Job
from tests import factories
from tests.support.workers import worker_path

ROOT = worker_path("/tmp/arena-sandboxes-test")
CARD = factories.MODEL_CARD


def plan(start_offset: timedelta, *, name: str = "cup"):
    """A two-phase competition: each phase trains 1 h, then its arena runs 1 h."""
    return competition_plan(
        name=name,
        base_model="/models/base",
        instruct_model="/models/instruct",
        starts_at=timezone.now() + start_offset,
        phase_lengths=[timedelta(hours=1), timedelta(hours=1)],
        arena_length=timedelta(hours=1),
    )


def states(competition):
    return [p.state for p in competition.phases.order_by("number")]


@pytest.mark.django_db
def test_a_tick_moves_each_phase_as_far_as_its_schedule_allows(tmp_path):
    competition = plan(-timedelta(minutes=90))  # phase 1 trained 60 min, its arena is open
    engine = Engine(cluster=LocalBackend(log_dir=tmp_path))
    made = phases_tick(engine=engine)
    assert [(t.phase.label, t.to_state) for t in made] == [
        ("phase-1", "running"),
        ("phase-1", "frozen"),
        ("phase-1", "serving"),
    ]
    assert states(competition) == ["serving", "scheduled"]
    assert phases_tick(engine=engine) == []  # nothing more is due

    later = timezone.now() + timedelta(minutes=35)  # phase 2 has started
    made = phases_tick(now=later, engine=engine)
    assert [(t.phase.label, t.to_state) for t in made] == [
        ("phase-1", "closed"),
        ("phase-2", "running"),
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_and_repeated_ticks_make_each_transition_exactly_once(tmp_path):
    competition = plan(-timedelta(hours=6))  # every transition of both phases is due
    engine = Engine(cluster=LocalBackend(log_dir=tmp_path))
    failures = []

    def ticker():
        try:
            for _ in range(4):
                phases_tick(engine=engine)
        except Exception as failure:  # noqa: BLE001 - reported below
            failures.append(failure)
        finally:
            connection.close()

    threads = [threading.Thread(target=ticker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert states(competition) == ["closed", "closed"]
    for phase in competition.phases.all():
        moves = list(
            PhaseTransition.objects.filter(phase=phase).values_list("from_state", "to_state")
        )
        assert moves == [
            ("scheduled", "running"),
            ("running", "frozen"),
            ("frozen", "serving"),
            ("serving", "closed"),
        ]


def make_checkpoint(agent, path="/tmp/ckpt"):
    account = ClusterAccount.objects.get(name=agent.cluster_account)
    job = Job.objects.create(
        account=account, backend="local", scheduler_id=f"{agent.name}-{path}", name="sft",
        qos="normal", nodes=1, gpus=1, time_limit_minutes=10, workdir="/tmp", script="",
        stdout_path="", state="COMPLETED",
    )  # fmt: skip
    return Checkpoint.objects.create(
        agent=agent, path=path, job=job, architecture="LlamaForCausalLM", parameters=1,
        end_of_turn_token="<|im_end|>", weights_sha256="0" * 64,
    )  # fmt: skip


@pytest.fixture
def agents(tmp_path):
    """Two provisioned agents (Unix users, sandboxes, local cluster accounts)."""
    sandboxes = UnixSandboxes(ROOT)
    backend = LocalBackend(log_dir=tmp_path / "cluster")
    made = [
        agent_provision(name=name, sandboxes=sandboxes, backend=backend).agent
        for name in ("eng_ann", "eng_bob")
    ]
    yield made, sandboxes, backend
    for agent in made:
        agent_deprovision(name=agent.name, sandboxes=sandboxes, backend=backend)


@pytest.mark.django_db
def test_a_nomination_a_second_before_the_freeze_counts_and_one_a_second_after_is_refused(
    agents,
):
    (ann, _), _, backend = agents
    competition = plan(-timedelta(minutes=10))
    phases_tick(engine=Engine(cluster=backend))
    phase = competition.phases.get(number=1)
    checkpoint = make_checkpoint(ann)

    Phase.objects.filter(pk=phase.pk).update(ends_at=timezone.now() + timedelta(seconds=1))
    nomination_set(agent=ann, checkpoint_id=checkpoint.pk, model_card=CARD)

    Phase.objects.filter(pk=phase.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(RegistrationRefused, match="nominations for phase-1 closed at"):
        nomination_set(agent=ann, checkpoint_id=checkpoint.pk, model_card=CARD)

    (freeze,) = [t for t in phases_tick(engine=Engine(cluster=backend)) if t.to_state == "frozen"]
    assert [n["agent"] for n in freeze.detail["nominations"]] == ["eng_ann"]


@pytest.mark.django_db
def test_at_phase_two_budgets_reset_and_each_agent_gets_only_its_own_battles(agents, settings):
    (ann, bob), sandboxes, backend = agents
    engine = Engine(cluster=backend, sandboxes=sandboxes)
    competition = plan(-timedelta(minutes=10))
    phase_1, phase_2 = competition.phases.order_by("number")
    Phase.objects.filter(pk=phase_2.pk).update(gpu_hours=Decimal("250"), api_credit_usd=50)
    phases_tick(engine=engine)
    for agent in (ann, bob):
        checkpoint = make_checkpoint(agent, path=f"/tmp/{agent.name}")
        nomination_set(agent=agent, checkpoint_id=checkpoint.pk, model_card=CARD)

    # Phase 1 freezes; its nominees and the references enter the arena.
    phases_tick(now=phase_1.ends_at, engine=engine)
    entries = {e.contestant.display_name: e for e in PhaseContestant.objects.filter(phase=phase_1)}
    assert set(entries) == {
        "reference-base", "reference-instruct", "eng_ann-phase-1", "eng_bob-phase-1",
    }  # fmt: skip
    ann_model = entries["eng_ann-phase-1"].contestant
    bob_model = entries["eng_bob-phase-1"].contestant
    base = entries["reference-base"].contestant
    votes = [(ann_model, base, "a"), (ann_model, base, "b"), (bob_model, base, "a")]
    for a, b, choice in votes:
        battle = factories.complete_battle(a=a, b=b)
        battle.phase = "phase-1"
        battle.save()
        vote_record(battle_id=battle.pk, choice=choice, voter_key=battle.voter_key, ip_hash="ip")

    ann_token = token_issue(agent=ann, kind="api")
    api = Client()
    headers = {"Authorization": f"Bearer {ann_token}"}
    refused = api.get("/api/v1/votes", headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "no_feedback"

    phases_tick(now=phase_2.starts_at, engine=engine)

    account = ClusterAccount.objects.get(name=ann.cluster_account)
    assert account.period == "phase-2" and account.gpu_hours_limit == 250
    ann.refresh_from_db()
    assert ann.credit_limit == ann.credit_spent + 50

    votes_reply = api.get("/api/v1/votes", headers=headers).json()
    assert votes_reply["own_model"] == "eng_ann-phase-1"
    assert len(votes_reply["battles"]) == 2
    assert all(
        "eng_bob-phase-1" not in (b["model_a"], b["model_b"]) for b in votes_reply["battles"]
    )
    assert votes_reply["battles"][0]["conversation_a"][0]["content"] == "What is 2 plus 2?"
    assert votes_reply["comparisons"] == [
        {"opponent": "reference-base", "wins": 1, "losses": 1, "ties": 0}
    ]
    board = api.get("/api/v1/leaderboard", headers=headers).json()
    assert {row["model"] for row in board["raw"]["scores"]} == {
        "eng_ann-phase-1", "eng_bob-phase-1", "reference-base",
    }  # fmt: skip
    assert all(row["ci_low"] <= row["score"] <= row["ci_high"] for row in board["raw"]["scores"])

    # One category's table of the same phase: only its battles (ann's two, tagged math).
    settings.ARENA_CATEGORY_MIN_BATTLES = 2
    Battle.objects.filter(phase="phase-1", answers__contestant=ann_model).update(
        categories=",math,"
    )
    math = api.get("/api/v1/leaderboard?category=math", headers=headers).json()
    assert math["category"] == "math" and math["n_battles"] == 2
    assert {row["model"] for row in math["raw"]["scores"]} == {"eng_ann-phase-1", "reference-base"}
    too_few = api.get("/api/v1/leaderboard?category=coding", headers=headers)
    assert too_few.status_code == 404 and too_few.json()["error"]["code"] == "too_few_battles"
    assert "coding category has 0 counted battles" in too_few.json()["error"]["message"]
    unknown = api.get("/api/v1/leaderboard?category=poetry", headers=headers)
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_category"
    assert api.get("/api/v1/leaderboard", headers=headers).json()["n_battles"] == 3

    bundle = FeedbackBundle.objects.get(agent=ann, phase=phase_2)
    folder = Path(bundle.folder)
    assert folder == Path(ann.sandbox) / "feedback" / "phase-1"
    lines = (folder / "battles.jsonl").read_text().splitlines()
    assert [json.loads(line)["battle_id"] for line in lines] == [
        b["battle_id"] for b in votes_reply["battles"]
    ]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert FeedbackBundle.objects.get(agent=bob, phase=phase_2).battles == 1


@pytest.mark.django_db
def test_feedback_needs_an_agent_token():
    assert Client().get("/api/v1/votes").status_code == 401
    assert (
        Client().get("/api/v1/leaderboard", headers={"Authorization": "Bearer x"}).status_code
        == 401
    )
