from decimal import Decimal

import pytest

from agents.models import Agent, Checkpoint, Nomination
from agents.services import RegistrationRefused, nomination_set, parse_model_card
from arena.competition.models import Phase
from cluster.models import ClusterAccount, Job
from tests import factories

pytestmark = pytest.mark.django_db

CARD = factories.MODEL_CARD


def make_agent(name):
    account = ClusterAccount.objects.create(
        name=f"agent_{name}", unix_user=f"agent_{name}", gpu_hours_limit=Decimal(10), max_gpus=8,
        max_preemptible_gpus=8, max_job_hours=24, storage_gib_limit=1,
    )  # fmt: skip
    agent = Agent.objects.create(name=name, cluster_account=account)
    job = Job.objects.create(
        account=account, backend="slurm", scheduler_id=f"{name}-1", name="sft", qos="normal", nodes=1, gpus=1,
        time_limit_minutes=10, workdir="/tmp", script="", stdout_path="", state="COMPLETED",
    )  # fmt: skip
    checkpoint = Checkpoint.objects.create(
        agent=agent, path=f"/tmp/{name}", job=job, architecture="LlamaForCausalLM", parameters=1,
        end_of_turn_token="<|im_end|>", weights_sha256="0" * 64,
    )  # fmt: skip
    return agent, checkpoint


@pytest.fixture
def phase():
    return factories.running_phase()


def test_an_agent_nominates_and_may_change_its_mind_until_the_freeze(phase):
    agent, first = make_agent("ann")
    second = Checkpoint.objects.create(
        agent=agent, path="/tmp/ann2", job=first.job, architecture="x", parameters=1,
        end_of_turn_token="<|im_end|>", weights_sha256="1" * 64,
    )  # fmt: skip
    nomination_set(agent=agent, checkpoint_id=first.pk, model_card=CARD)
    nomination_set(agent=agent, checkpoint_id=second.pk, model_card=CARD)
    chosen = Nomination.objects.get()
    assert chosen.checkpoint == second and chosen.card_fields["steps"] == 250

    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.FROZEN)
    with pytest.raises(
        RegistrationRefused, match=r"nominations for phase-1 closed at .* \(the phase is frozen\)"
    ):
        nomination_set(agent=agent, checkpoint_id=first.pk, model_card=CARD)
    assert Nomination.objects.get().checkpoint == second


def test_another_agents_checkpoint_cannot_be_nominated(phase):
    ann, _ = make_agent("ann")
    _, bens = make_agent("ben")
    with pytest.raises(RegistrationRefused, match="is not one of yours"):
        nomination_set(agent=ann, checkpoint_id=bens.pk, model_card=CARD)
    assert not Nomination.objects.exists()


def test_without_a_phase_nothing_can_be_nominated():
    agent, checkpoint = make_agent("ann")
    with pytest.raises(RegistrationRefused, match="no phase is open"):
        nomination_set(agent=agent, checkpoint_id=checkpoint.pk, model_card=CARD)


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("# no front matter", "must start with YAML front matter"),
        ("---\nsteps: [\n---\n", "not valid YAML"),
        ("---\ntraining_method: SFT\n---\n", "lacks 'steps'"),
        (CARD.replace("steps: 250", "steps: many"), "'steps' has the wrong type"),
    ],
)
def test_a_model_card_needs_its_front_matter(card, message):
    with pytest.raises(RegistrationRefused, match=message):
        parse_model_card(card)


@pytest.mark.parametrize(
    ("card", "message"),
    [
        (CARD.replace("steps: 250", "steps: &n 250\nagain: *n"), "anchors or aliases"),
        (CARD.replace("hardware: 2 x H100", "hardware: " + "x" * 1_001), "longer than 1000"),
        (CARD.replace("steps: 250", "steps: " + "9" * 5_000), "YAML cannot read"),
        (CARD.replace("gpu_hours: 1.5", "gpu_hours: .nan"), "'gpu_hours' must be a number"),
        (CARD.replace("[generated:tiny-chats]", "[[[[x]]]]"), "nests deeper"),
        (CARD.replace("---\n#", "extra: [" + "1, " * 2_000 + "1]\n---\n#"), "more than 2000"),
        ("---\n" + "x: 1\n" * 4_000 + "---\n", "longer than 16384 bytes"),
    ],
)
def test_a_model_card_beyond_the_readers_bounds_is_refused(card, message):
    with pytest.raises(RegistrationRefused, match=message):
        parse_model_card(card)


def test_only_the_known_fields_of_a_card_are_kept():
    card = CARD.replace("---\n#", "jobs: [12, '13']\nwhatever: {deep: [1]}\n---\n#")

    fields = parse_model_card(card)

    assert fields["jobs"] == [12, "13"] and fields["steps"] == 250
    assert "whatever" not in fields
