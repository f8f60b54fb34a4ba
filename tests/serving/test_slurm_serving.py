"""The Slurm serving backend: a contestant's model server as a GPU job on the real local
cluster (`transformers serve` on a fake GPU standing in for vLLM), answering like any endpoint,
and gone when the backend stops. The phase worker's serving part (`ArenaServers`) serves a
phase's contestants through it and keeps them served: a job near its time limit and a job
whose node fails are replaced, and the contestants moved, without failing a battle."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from arena.battles.generation import battle_run
from arena.battles.models import Battle
from arena.battles.services import battle_create
from arena.competition.models import Phase
from arena.phases.models import PhaseContestant, WorkerFailure
from arena.phases.serving import ArenaServers
from arena.serving.backends import (
    LOST,
    OLD_STOPPED,
    REPLACEMENT_READY,
    REPLACEMENT_STARTED,
    SWAPPED,
)
from arena.serving.client import StreamEnd, stream_chat
from arena.serving.local import REPO_ROOT, ServerStartError, guarded_serve_command
from arena.serving.models import Contestant, ServingEvent
from arena.serving.selectors import contestant_endpoint
from arena.serving.slurm import SERVING_ACCOUNT, SlurmServingBackend
from cluster.models import Job
from tests import factories
from tests.cluster.conftest import wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TEST_COMMAND = (
    f"env OMP_NUM_THREADS=1 PYTHONPATH={shlex.quote(str(REPO_ROOT))} "
    + " ".join(shlex.quote(part) for part in guarded_serve_command())
    + ' --served-model-name "$SERVED_MODEL_NAME" --host 0.0.0.0 --port "$PORT" --device cpu'
    + ' "$CHECKPOINT"'
)

SERVER_MEMORY_MB = 1500  # a tiny model's server; the cluster confines jobs to what they ask


@pytest.fixture
def serving_folder() -> Iterator[Path]:
    """The backend's folder, in the platform's var/ as in production: a job's /tmp is its own
    (job_container/tmpfs), so a folder under pytest's /tmp would not be the job's."""
    folder = Path(settings.VAR_DIR) / "test-serving" / uuid.uuid4().hex[:8]
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def answer(endpoint) -> tuple[str, StreamEnd]:
    parts, end = [], None
    async for event in stream_chat(
        endpoint,
        [{"role": "user", "content": "What is 2 plus 3?"}],
        max_tokens=12,
        temperature=0.0,
        timeout_s=60,
    ):
        if isinstance(event, StreamEnd):
            end = event
        else:
            parts.append(event.text)
    return "".join(parts), end


def test_a_contestant_is_served_by_a_gpu_job_and_stopped_with_it(
    tiny_models, slurm, serving_folder
):
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=180,
        memory_mb=SERVER_MEMORY_MB,
    )  # fmt: skip
    try:
        (endpoint,) = backend.start([tiny_models / "instruct"])
        (job,) = backend.jobs  # this backend's own: other workers serve on the same account
        wait_for_state(job, {"RUNNING"}, backend=slurm)
        assert job.gpus == 1
        text, end = asyncio.run(answer(endpoint))
        assert end.finish_reason in {"stop", "length"}, end.error
        assert text.strip()
    finally:
        backend.stop()
    wait_for_state(job, {"CANCELLED"}, backend=slurm)


def test_a_folder_that_is_not_a_checkpoint_is_refused_before_any_job(slurm, tmp_path):
    backend = SlurmServingBackend(command=TEST_COMMAND, folder=tmp_path, cluster=slurm)
    with pytest.raises(ServerStartError, match="is not a model checkpoint"):
        backend.start([tmp_path])
    assert not Job.objects.exists()


# --- the phase worker keeps a phase's contestants served -------------------------------------
def serving_phase(tiny_models: Path, *names: str) -> Phase:
    """A phase in the arena whose contestants are the reference models `names`."""
    phase = factories.running_phase()
    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.SERVING)
    for name in names:
        PhaseContestant.objects.create(
            phase=phase, contestant=factories.contestant(f"reference-{name}"),
            role=PhaseContestant.Role.REFERENCE, checkpoint_path=str(tiny_models / name),
        )  # fmt: skip
    return phase


def worker_rounds_until(
    servers: ArenaServers, done: Callable[[], bool], *, timeout_s: float, every_s: float = 1.0
) -> None:
    """Run the worker's serving round (as `phases run` does) until `done()`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "not done in time; events: " + "; ".join(
            f"{e.contestant}: {e.kind} ({e.reason})" for e in ServingEvent.objects.all()
        )
        servers.sync()
        time.sleep(every_s)


def kinds(contestant: Contestant) -> list[str]:
    return list(
        ServingEvent.objects.filter(contestant=contestant)
        .order_by("at", "pk")
        .values_list("kind", flat=True)
    )


class HeldBattle:
    """A real battle whose voter reads slowly: both answers stream from the contestants'
    servers, and the voter's side takes no more after the first words until `release()`."""

    def __init__(self, battle: Battle) -> None:
        self.battle = battle
        self.streaming = threading.Event()
        self.released = threading.Event()
        self.result: Battle | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        assert self.streaming.wait(60), "the battle never started streaming"

    async def _run(self) -> None:
        async def slow_voter(event) -> None:
            self.streaming.set()
            await asyncio.to_thread(self.released.wait, 180)

        self.result = await battle_run(self.battle.pk, slow_voter)

    def release(self) -> Battle:
        self.released.set()
        self.thread.join(timeout=120)
        assert self.result is not None
        return self.result


def assert_answered(battle: Battle) -> None:
    assert battle.state == Battle.State.COMPLETE, battle.state
    for answer in battle.answers.all():
        assert answer.finish_reason in {"stop", "length"}, answer.error
        assert answer.text.strip()


def test_the_worker_moves_contestants_to_new_jobs_before_the_time_limit_without_failing_a_battle(
    tiny_models, slurm, serving_folder
):
    serving_phase(tiny_models, "base", "instruct")
    backends: list[SlurmServingBackend] = []

    def slurm_backend() -> SlurmServingBackend:
        # 5-minute jobs renewed 280 s before their end: each is due 20 s after it starts, and
        # an old one still has minutes left to serve the battle held open on it, however
        # slowly a loaded machine loads the models.
        backend = SlurmServingBackend(
            command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=180,
            memory_mb=SERVER_MEMORY_MB, time_limit_minutes=5, renew_margin_s=280,
            health_interval_s=5, drain_timeout_s=150,
        )  # fmt: skip
        backends.append(backend)
        return backend

    servers = ArenaServers(backend_factory=slurm_backend)
    try:
        assert sorted(servers.sync()) == ["reference-base", "reference-instruct"]
        contestants = list(Contestant.objects.order_by("display_name"))
        first = {c.pk: contestant_endpoint(c) for c in contestants}
        # (The first is due already: its replacement may be queued by now.)
        first_jobs = {model.current.job.scheduler_id for b in backends for model in b.models}
        assert len(first_jobs) == 2
        # A voter's battle streams from the first two servers while they are replaced.
        held = HeldBattle(battle_create(prompt="Tell me a story.", voter_key="v", ip_hash="h"))

        def moved() -> bool:
            for backend in backends:
                if any(model.draining for model in backend.models):
                    backend.renew_margin_s = 0  # once is enough for this test
            return all(
                contestant_endpoint(c).base_url != first[c.pk].base_url
                for c in Contestant.objects.all()
            )

        worker_rounds_until(servers, moved, timeout_s=150)
        # New battles go to the new servers; the old ones still serve the battle on them.
        for contestant in Contestant.objects.all():
            assert contestant.active
            assert kinds(contestant) == [REPLACEMENT_STARTED, REPLACEMENT_READY, SWAPPED]
            assert "time limit" in contestant.serving_events.get(kind=SWAPPED).reason
        for _ in range(3):
            servers.sync()
            time.sleep(1)
        running = {job.scheduler_id for job in slurm.queue() if job.state == "RUNNING"}
        assert first_jobs <= running, "an old server was stopped under a streaming battle"

        assert_answered(held.release())
        worker_rounds_until(
            servers,
            lambda: all(kinds(c)[-1:] == [OLD_STOPPED] for c in Contestant.objects.all()),
            timeout_s=30,
        )
        for job in Job.objects.filter(scheduler_id__in=first_jobs):
            wait_for_state(job, {"CANCELLED"}, backend=slurm, timeout_s=30)
        # The old servers are gone: a new battle is answered by the new ones.
        fresh = battle_create(prompt="And another one?", voter_key="w", ip_hash="i")
        assert_answered(asyncio.run(battle_run(fresh.pk, _ignore)))
        # Every server, replacements too, ran on the organizers' serving account.
        assert Job.objects.exclude(account__name=SERVING_ACCOUNT).count() == 0
        assert Job.objects.count() >= 4
    finally:
        servers.stop()


async def _ignore(event) -> None:
    return None


@pytest.fixture
def failing_node(slurm) -> Iterator[Callable[[str], None]]:
    """Take a node down as a failure would; it is resumed afterwards whatever happens, since
    the cluster is shared."""
    downed: list[str] = []

    def fail(node: str) -> None:
        downed.append(node)
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=down", "reason=arena-test"],
            check=True,
        )

    yield fail
    for node in downed:
        # The cluster returns a node by itself once its slurmd registers (ReturnToService=2):
        # resuming one that is back already is refused, and that is fine.
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)


@pytest.mark.serial  # it takes a node down, and other workers' jobs on it would fail
def test_a_server_whose_node_fails_is_replaced_on_another_node(
    tiny_models, slurm, serving_folder, failing_node
):
    serving_phase(tiny_models, "instruct")
    # On a node no one else uses, so that failing it takes down no other test's jobs.
    busy = {job.node_list for job in slurm.queue()}
    idle = [n.name for n in slurm.nodes() if n.gpus_allocated == 0 and n.name not in busy]
    assert idle, "no idle node to fail"
    node = idle[-1]
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=180,
        memory_mb=SERVER_MEMORY_MB, health_interval_s=2, sbatch_options=(f"--nodelist={node}",),
    )  # fmt: skip
    servers = ArenaServers(backend_factory=lambda: backend)
    try:
        assert servers.sync() == ["reference-instruct"]
        (contestant,) = Contestant.objects.all()
        before = contestant_endpoint(contestant)
        (lost_job,) = backend.jobs
        assert backend.models[0].current.node == node
        backend.sbatch_options = ()  # what replaces it may run anywhere else

        failing_node(node)
        worker_rounds_until(
            servers,
            lambda: (
                Contestant.objects.get().base_url not in {before.base_url, ""}
                and Contestant.objects.get().active
            ),
            timeout_s=90,
        )
        assert kinds(contestant) == [LOST, REPLACEMENT_STARTED, REPLACEMENT_READY, SWAPPED]
        assert "node failed" in contestant.serving_events.get(kind=LOST).reason
        # The organizers' dashboard shows the loss as a failure of the worker.
        assert "node failed" in WorkerFailure.objects.get(task="serving reference-instruct").error
        (model,) = backend.models
        assert model.current.node not in {"", node}
        lost_job.refresh_from_db()
        assert lost_job.scheduler_id not in {j.scheduler_id for j in slurm.queue()}
        text, end = asyncio.run(answer(contestant_endpoint(Contestant.objects.get())))
        assert end.finish_reason in {"stop", "length"}, end.error
        assert text.strip()
    finally:
        servers.stop()
