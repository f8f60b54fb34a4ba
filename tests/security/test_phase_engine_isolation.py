"""Issue 12, item 4: one agent cannot halt the phase engine, and a retry never repeats the
start's usage reset.

The attack is played by a real agent's Unix user in its real sandbox, against the real Slurm
cluster: it replaces `~/feedback` with a file, so the feedback the next phase owes it cannot be
written. The phase starts anyway, its rival gets its feedback, the failure is recorded against
the attacker (and shown to the organizers), and later ticks retry the attacker's feedback
without resetting anyone's GPU usage again."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from agents.models import Nomination
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from arena.competition.models import Phase
from arena.phases.models import AgentStepFailure, FeedbackBundle, WorkerFailure
from arena.phases.services import Engine, competition_plan, phases_tick
from cluster.backends.slurm import SlurmBackend
from cluster.models import ClusterAccount
from cluster.slurm import cli
from tests import factories
from tests.phases.test_engine import make_checkpoint
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")


@pytest.fixture
def two_agents(slurm: SlurmBackend):
    """Two provisioned agents: Unix users, 0700 sandboxes, Slurm accounts."""
    sandboxes = UnixSandboxes(ROOT)
    made = [
        agent_provision(name=name, sandboxes=sandboxes, backend=slurm).agent
        for name in ("iso_mallory", "iso_victor")
    ]
    yield made, sandboxes
    for agent in made:
        agent_deprovision(name=agent.name, sandboxes=sandboxes, backend=slurm)
        cli.sacctmgr(
            "modify", "account", "where", f"name={agent.cluster_account}", "set", "RawUsage=0"
        )


def as_agent(agent, shell: str) -> None:
    """A command in the agent's own shell, as its own Unix user."""
    result = cli.run(["bash", "-c", shell], user=agent.unix_user, cwd=agent.sandbox, check=False)
    assert "denied" not in result.stderr, result.stderr


def use_gpus(agent, seconds: int) -> None:
    """The agent's own sbatch of a 1-GPU job; returns once Slurm charged its usage."""
    job_id = cli.run(
        ["sbatch", "--parsable", f"--account={agent.cluster_account}", "--gres=gpu:1", "-t", "1",
         f"--chdir={agent.sandbox}", "--output=/dev/null", "--wrap", f"sleep {seconds}"],
        user=agent.unix_user, cwd=agent.sandbox,
    ).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        rows = cli.squeue_rows({"state": "%T"}, "-j", job_id, "-t", "all")
        if rows and rows[0]["state"] == "COMPLETED":
            return
        assert time.monotonic() < deadline, f"job {job_id} did not complete: {rows}"
        time.sleep(0.5)


def charged_seconds(slurm: SlurmBackend, agent) -> float:
    """GPU-seconds Slurm counts against the agent's budget, once it stops changing."""
    last = -1.0
    for _ in range(15):
        now = slurm.charged_gpu_minutes(account=agent.cluster_account.name) * 60
        if now == last:
            return now
        last = now
        time.sleep(1)
    return last


def test_an_agent_that_breaks_its_feedback_folder_cannot_stop_the_phase_or_reset_budgets(
    two_agents, slurm: SlurmBackend
) -> None:
    (mallory, victor), sandboxes = two_agents
    engine = Engine(cluster=slurm, sandboxes=sandboxes)
    competition = competition_plan(
        name="isolation", base_model="/models/base", instruct_model="",
        starts_at=timezone.now() - timedelta(minutes=10),
        phase_lengths=[timedelta(hours=1), timedelta(hours=1)], arena_length=timedelta(hours=1),
    )  # fmt: skip
    phase_1, phase_2 = competition.phases.order_by("number")
    phases_tick(engine=engine)  # phase 1 runs
    for agent in (mallory, victor):
        Nomination.objects.create(
            agent=agent, phase=phase_1, checkpoint=make_checkpoint(agent, f"/tmp/{agent.name}"),
            model_card=factories.MODEL_CARD, card_fields={},
        )  # fmt: skip
    phases_tick(now=phase_1.ends_at, engine=engine)  # phase 1's models are in its arena

    # The attack, in mallory's own shell: the folder the feedback goes to is now a file.
    as_agent(mallory, "rm -rf ~/feedback; touch ~/feedback")

    phases_tick(now=phase_2.starts_at, engine=engine)

    phase_2.refresh_from_db()
    assert phase_2.state == Phase.State.RUNNING
    # Victor got his feedback, in files and through the API's record of it.
    assert FeedbackBundle.objects.filter(phase=phase_2, agent=victor).exists()
    assert (Path(victor.sandbox) / "feedback" / "phase-1" / "battles.jsonl").is_file()
    # Mallory's failure is recorded against her alone; her budget is the phase's all the same.
    [failure] = AgentStepFailure.objects.all()
    assert (failure.agent, failure.phase, failure.step) == (
        mallory, phase_2, AgentStepFailure.Step.FEEDBACK,
    )  # fmt: skip
    assert failure.resolved_at is None and failure.error
    periods = ClusterAccount.objects.filter(
        name__in=[mallory.cluster_account, victor.cluster_account]
    )
    assert set(periods.values_list("period", flat=True)) == {"phase-2"}

    # Both use GPUs in phase 2; the next ticks retry mallory's feedback and reset nothing.
    use_gpus(mallory, 3)
    use_gpus(victor, 3)
    used = {agent.name: charged_seconds(slurm, agent) for agent in (mallory, victor)}
    assert min(used.values()) >= 3, used
    for minutes in (1, 2):
        phases_tick(now=phase_2.starts_at + timedelta(minutes=minutes), engine=engine)
    failure.refresh_from_db()
    assert failure.attempts == 3 and failure.resolved_at is None
    for agent in (mallory, victor):
        assert (
            slurm.charged_gpu_minutes(account=agent.cluster_account.name) * 60 >= used[agent.name]
        )

    # The organizers see who failed and why.
    staff = Client()
    staff.force_login(User.objects.create_user("org", password="x", is_staff=True))
    page = staff.get("/organizer/").content.decode()
    assert "iso_mallory" in page and "feedback" in page and failure.error[:40] in page

    # Mallory repairs her sandbox: the next tick delivers her feedback and clears the failure.
    as_agent(mallory, "rm -f ~/feedback")
    phases_tick(now=phase_2.starts_at + timedelta(minutes=3), engine=engine)
    failure.refresh_from_db()
    assert failure.resolved_at is not None
    assert FeedbackBundle.objects.filter(phase=phase_2, agent=mallory).exists()
    assert (Path(mallory.sandbox) / "feedback" / "phase-1" / "battles.jsonl").is_file()


class RecordingServers:
    """Stands in for the arena's model servers: what the worker asked of them, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sync(self) -> list[str]:
        self.calls.append("sync")
        return []

    def stop(self) -> None:
        self.calls.append("stop")


def test_a_failing_tick_does_not_stop_the_worker_nor_the_arenas_model_servers(monkeypatch):
    servers = RecordingServers()
    ticks = []

    def failing_tick(**kwargs):
        ticks.append(timezone.now())
        if len(ticks) >= 4:  # the operator stops the worker once it has tried a few times
            signal.raise_signal(signal.SIGTERM)
        raise RuntimeError("the scheduler is unreachable")

    from arena.phases.management.commands import phases as command

    monkeypatch.setattr(command, "phases_tick", failing_tick)
    monkeypatch.setattr(command, "ArenaServers", lambda: servers)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        call_command("phases", "run", "--every", "0.05", "--storage-every", "0")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    assert len(ticks) == 4  # it kept ticking after each failure
    # The servers were kept in every round and stopped only when the worker was stopped.
    assert servers.calls.count("stop") == 1 and servers.calls[-1] == "stop"
    assert servers.calls.count("sync") >= 3
    # Recorded for the dashboard, once, with how often it happened.
    [failure] = WorkerFailure.objects.filter(task="tick")
    assert failure.repeats == 4 and "the scheduler is unreachable" in failure.error


def test_a_phase_whose_move_fails_does_not_hold_up_the_others_and_tick_says_so(monkeypatch):
    from arena.phases import services

    broken, sound = (
        competition_plan(
            name=name, base_model="/models/base", instruct_model="",
            starts_at=timezone.now() - timedelta(minutes=5),
            phase_lengths=[timedelta(hours=1)], arena_length=timedelta(hours=1),
        )
        for name in ("broken", "sound")
    )  # fmt: skip
    start = services.MOVES[Phase.State.RUNNING]

    def start_or_fail(phase, engine):
        if phase.competition_id == broken.pk:
            raise RuntimeError("the scheduler refused the phase's limits")
        return start(phase, engine)

    monkeypatch.setitem(services.MOVES, Phase.State.RUNNING, start_or_fail)

    with pytest.raises(CommandError, match="some moves failed"):
        call_command("phases", "tick")

    assert [p.state for p in sound.phases.all()] == [Phase.State.RUNNING]
    assert [p.state for p in broken.phases.all()] == [Phase.State.SCHEDULED]
    [failure] = WorkerFailure.objects.all()
    assert failure.phase == broken.phases.get() and "refused the phase's limits" in failure.error
    # Once the cause is gone, the next tick makes the move.
    monkeypatch.setitem(services.MOVES, Phase.State.RUNNING, start)
    call_command("phases", "tick")
    assert [p.state for p in broken.phases.all()] == [Phase.State.RUNNING]
