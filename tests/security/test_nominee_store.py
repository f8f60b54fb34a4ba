"""Issue 12, item 5: what the arena serves and evaluates is the platform's own copy of a
nominated checkpoint, made when the phase freezes, hashed, and checked again before each server
starts. Nothing the agent does in its sandbox afterwards changes it; a link is never followed
into a rival's files; a copy changed in the store, or a model that cannot start, is marked,
shown, and skipped while the others are served."""

from __future__ import annotations

import hashlib
import shutil
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents.models import NomineeCopy
from agents.services import checkpoint_register, nomination_set
from arena.competition.models import Competition, Phase
from arena.phases.models import PhaseContestant
from arena.phases.services import phases_tick
from arena.phases.serving import ArenaServers
from arena.serving.backends import LocalServingBackend, ServingBackend
from arena.serving.client import Endpoint
from arena.serving.local import ServerStartError
from arena.serving.models import Contestant
from tests import factories
from tests.conftest import TEST_LOG_DIR
from tests.security.conftest import Player
from tests.security.test_hostile_checkpoints import checkpoint_of
from tests.security.test_sandbox_links import job_writing_to

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path, settings) -> Path:
    settings.AGENTS_NOMINEE_STORE = tmp_path / "nominees"
    return settings.AGENTS_NOMINEE_STORE


@pytest.fixture
def phase(store):
    """A running phase whose references are left out (they are the platform's own)."""
    competition = Competition.objects.create(name="store", base_model="", instruct_model="")
    now = timezone.now()
    return Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.RUNNING,
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=6),
    )  # fmt: skip


def nominate(player: Player, source: Path, number: int) -> Path:
    """Register the checkpoint `source` (copied into the sandbox) and nominate it."""
    folder = checkpoint_of(player, source)
    job = job_writing_to(player, player.home, 40 + number)
    checkpoint = checkpoint_register(
        agent=player.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
    )
    nomination_set(
        agent=player.provisioned.agent, checkpoint_id=checkpoint.pk, model_card=factories.MODEL_CARD
    )
    return folder


def freeze(phase: Phase) -> None:
    """The phase ends: its nominations freeze and its nominees become contestants."""
    phases_tick(now=phase.ends_at + timedelta(seconds=1))
    assert Phase.objects.get(pk=phase.pk).state == Phase.State.SERVING


def entry_of(player: Player) -> PhaseContestant:
    return PhaseContestant.objects.select_related("contestant", "nomination").get(
        nomination__agent=player.provisioned.agent
    )


class Recording(ServingBackend):
    """A serving backend that records what it was asked to serve and starts nothing; it
    refuses the checkpoints named in `broken`, as a real server whose model does not load."""

    started: list[Path] = []
    broken: set[str] = set()

    def start(self, checkpoints: list[Path]) -> list[Endpoint]:
        (checkpoint,) = checkpoints
        if any(name in str(checkpoint) for name in self.broken):
            raise ServerStartError(f"{checkpoint}: the model does not load")
        Recording.started.append(checkpoint)
        return [Endpoint(base_url=f"http://127.0.0.1:9/{len(self.started)}/v1", model="m")]

    def stop(self) -> None:
        pass


@pytest.fixture
def recording():
    Recording.started, Recording.broken = [], set()
    return ArenaServers(backend_factory=Recording)


def test_weights_swapped_after_nominating_never_reach_the_arena(
    players, phase, store, tiny_models, recording
):
    ann = players("sec_store_a")
    folder = nominate(ann, tiny_models / "instruct", 1)
    registered = sha256(folder / "model.safetensors")
    freeze(phase)
    # After the freeze, the agent swaps in the markdown model's weights and config.
    ann.attack(
        "chmod u+w ckpt/* && cat /dev/null > ckpt/model.safetensors && "
        'echo \'{"model_type": "llama", "num_hidden_layers": 1000000}\' > ckpt/config.json'
    )

    entry = entry_of(ann)
    served = Path(entry.checkpoint_path)
    assert store in served.parents and folder not in [served, *served.parents]
    assert entry.contestant.checkpoint_path == str(served)
    assert sha256(served / "model.safetensors") == registered
    info = served.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) & 0o077 == 0
    for file in served.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) & 0o077 == 0, file
    assert stat.S_IMODE(store.stat().st_mode) == 0o700

    assert recording.sync() == [entry.contestant.display_name]
    assert Recording.started == [served]
    assert Contestant.objects.get(pk=entry.contestant_id).active


def test_weights_swapped_between_registering_and_the_freeze_are_refused(
    players, phase, store, tiny_models, recording
):
    ann = players("sec_store_b")
    folder = nominate(ann, tiny_models / "instruct", 2)
    shutil.copy(tiny_models / "markdown" / "model.safetensors", folder / "model.safetensors")
    freeze(phase)

    copy = NomineeCopy.objects.get(nomination__agent=ann.provisioned.agent)
    assert "changed since" in copy.not_servable_reason
    assert recording.sync() == [] and Recording.started == []


def test_a_weight_file_linked_to_a_rivals_is_never_copied_or_served(
    players, phase, store, tiny_models, recording
):
    ann, ben = players("sec_store_c"), players("sec_store_d")
    nominate(ann, tiny_models / "instruct", 3)
    rivals = checkpoint_of(ben, tiny_models / "markdown", "secret-ckpt")
    # After registering, ann points its weights at ben's (and, were it root, anything).
    ann.attack(f"rm -f ckpt/model.safetensors && ln -s {rivals}/model.safetensors ckpt/")
    freeze(phase)

    copy = NomineeCopy.objects.get(nomination__agent=ann.provisioned.agent)
    assert "symbolic link" in copy.not_servable_reason
    secret = sha256(rivals / "model.safetensors")
    assert not any(sha256(f) == secret for f in store.rglob("*") if f.is_file())
    assert recording.sync() == [] and Recording.started == []


def test_a_copy_changed_in_the_store_is_not_served_and_the_others_are(
    players, phase, store, tiny_models, recording
):
    ann, ben = players("sec_store_e"), players("sec_store_f")
    nominate(ann, tiny_models / "instruct", 4)
    nominate(ben, tiny_models / "markdown", 5)
    freeze(phase)
    tampered = Path(entry_of(ann).checkpoint_path) / "model.safetensors"
    tampered.chmod(0o600)
    with tampered.open("r+b") as weights:
        weights.seek(-4, 2)
        weights.write(b"\0\1\2\3")

    assert recording.sync() == [entry_of(ben).contestant.display_name]
    assert Recording.started == [Path(entry_of(ben).checkpoint_path)]
    copy = NomineeCopy.objects.get(nomination__agent=ann.provisioned.agent)
    assert "model.safetensors" in copy.not_servable_reason
    assert "sha256" in copy.not_servable_reason
    assert not Contestant.objects.get(pk=entry_of(ann).contestant_id).active
    # The next round does not try it again, and keeps the other served.
    assert recording.sync() == [] and len(Recording.started) == 1

    # The organizers see why.
    organizer = Client()
    organizer.force_login(User.objects.create_user("org", password="x", is_staff=True))
    page = organizer.get("/organizer/").content.decode()
    assert "not servable" in page and "sha256" in page


def test_a_nominee_whose_server_cannot_start_is_skipped_and_the_others_are_served(
    players, phase, store, tiny_models, recording
):
    ann, ben = players("sec_store_g"), players("sec_store_h")
    nominate(ann, tiny_models / "instruct", 6)
    nominate(ben, tiny_models / "markdown", 7)
    freeze(phase)
    Recording.broken = {Path(entry_of(ann).checkpoint_path).name}

    assert recording.sync() == [entry_of(ben).contestant.display_name]
    copy = NomineeCopy.objects.get(nomination__agent=ann.provisioned.agent)
    assert "does not load" in copy.not_servable_reason


def test_a_broken_config_among_good_models_stops_no_other_real_server(
    players, store, tiny_models, tmp_path
):
    """The real local backend: the competition's base model has a config that no server can
    load, ordered before the instruct reference; the nominee and the instruct are served."""
    broken = tmp_path / "broken-base"
    shutil.copytree(tiny_models / "base", broken)
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    competition = Competition.objects.create(
        name="broken", base_model=str(broken), instruct_model=str(tiny_models / "instruct")
    )
    now = timezone.now()
    phase = Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.RUNNING,
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=6),
    )  # fmt: skip
    ann = players("sec_store_i")
    nominate(ann, tiny_models / "markdown", 8)
    freeze(phase)

    servers = ArenaServers(
        backend_factory=lambda: LocalServingBackend(
            host="127.0.0.1", base_port=0, log_dir=TEST_LOG_DIR
        )
    )
    try:
        started = servers.sync()
        assert sorted(started) == sorted(
            [entry_of(ann).contestant.display_name, "reference-instruct"]
        )
        assert not Contestant.objects.get(display_name="reference-base").active
        assert Contestant.objects.get(display_name="reference-instruct").active
        assert servers.sync() == []  # the broken one is not retried every round
    finally:
        servers.stop()
