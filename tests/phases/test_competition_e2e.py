"""The whole two-phase competition, end to end, on the real local Slurm cluster: two reference
agents train as their own Unix users, the engine freezes and serves their models, a crowd votes
through the live site, phase 2 gives each agent exactly its own battles and its new budgets,
they train again, and the final leaderboard has every nominated model."""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from agents.models import Nomination
from agents.reference.install import reference_agent_install
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from arena.competition.models import Phase
from arena.leaderboard.services import phase_leaderboard_fit
from arena.phases.demo import agents_run, arena_close_now, competition_start, phase_end_now
from arena.phases.models import FeedbackBundle, PhaseContestant
from arena.phases.services import Engine, phases_tick
from arena.phases.serving import ArenaServers
from cluster.slurm import cli
from frontend.crowd import crowd_run
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SANDBOXES = worker_path("/tmp/arena-sandboxes-e2e")
MODELS = worker_path("/tmp/arena-e2e-models")  # world-readable, as a cluster's shared model store
RECIPES = {"e2e_full": "sft", "e2e_lora": "lora"}
FAST = ("--steps", "60", "--dpo-steps", "15", "--chats", "200")


PHASE2 = ("--steps", "60", "--dpo-steps", "15")  # phase 2 generates no chats


@pytest.fixture
def shared_models(tiny_models):
    if MODELS.exists():
        shutil.rmtree(MODELS)
    for name in ("base", "instruct"):
        shutil.copytree(tiny_models / name, MODELS / name)
    for path in [MODELS, *MODELS.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return MODELS


@pytest.fixture
def competitors(arena, slurm, settings):
    settings.AGENTS_ARENA_URL = arena.url
    sandboxes = UnixSandboxes(SANDBOXES)
    agents = []
    for name in RECIPES:
        provisioned = agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        reference_agent_install(Path(provisioned.agent.sandbox), provisioned.agent.unix_user)
        agents.append(provisioned.agent)
    yield agents, sandboxes
    for agent in agents:
        agent_deprovision(name=agent.name, sandboxes=sandboxes, backend=slurm)


def association(account: str) -> tuple[str, int]:
    """The GPU-minutes limit on the account's association, and the usage Slurm charges it."""
    rows = cli.sacctmgr_rows("assoc", ["account", "user", "grptresmins"], f"account={account}")
    (limits,) = [row for row in rows if not row["user"]]  # the account's own association
    raw = cli.run(["sshare", "-n", "-P", "-A", account, "-o", "Account,User,RawUsage"]).stdout
    usage = sum(int(line.split("|")[2] or 0) for line in raw.splitlines() if line.split("|")[1])
    return limits["grptresmins"], usage


def cli_as(agent, *args: str) -> subprocess.CompletedProcess[str]:
    home = agent.sandbox
    return subprocess.run(
        ["runuser", "-u", agent.unix_user, "--", "env", f"HOME={home}", "/usr/bin/python3",
         f"{home}/.arena/bin/arena-agent", *args],
        capture_output=True, text=True, cwd=home, timeout=120, check=False,
    )  # fmt: skip


def test_two_phases_with_feedback_on_the_real_cluster(arena, slurm, shared_models, competitors):
    agents, sandboxes = competitors
    say = print
    engine = Engine(cluster=slurm, sandboxes=sandboxes)
    competition = competition_start(shared_models / "base", shared_models / "instruct")
    phase_1, phase_2 = competition.phases.order_by("number")
    Phase.objects.filter(pk=phase_2.pk).update(gpu_hours=Decimal("250"))
    phases_tick(engine=engine)
    servers = ArenaServers()
    try:
        # Phase 1: real TRL jobs on Slurm, as the agents' own users, through the CLI.
        codes = agents_run(agents, 1, say, base=shared_models / "base", recipes=RECIPES, extra=FAST)
        assert codes == {"e2e_full": 0, "e2e_lora": 0}
        nominated = Nomination.objects.filter(phase=phase_1).select_related("checkpoint")
        assert {n.agent.name for n in nominated} == set(RECIPES)
        for nomination in nominated:
            runs = Path(nomination.agent.sandbox).glob("reference-agent/phase1-*/result.json")
            run = max(runs, key=lambda path: path.stat().st_mtime)  # this run, not an earlier one
            (trained,) = json.loads(run.read_text())["summaries"]
            before, after = trained["end_of_turn_rate_before"], trained["end_of_turn_rate_after"]
            say(f"{nomination.agent.name}: end-of-turn rate {before} -> {after}")
            assert before <= 0.1 and after >= 0.8

        phase_end_now(phase_1)
        phases_tick(engine=engine)
        assert sorted(servers.sync()) == sorted(
            ["e2e_full-phase-1", "e2e_lora-phase-1", "reference-base", "reference-instruct"]
        )
        report = crowd_run(url=arena.url, voters=3, battles=16, seed=1, max_seconds=240)
        assert len(report.votes) == 16, report.summary()

        # Phase 2 starts: feedback out, budgets in.
        arena_close_now(competition, phase_1)
        phases_tick(engine=engine)
        for agent in agents:
            limit, usage = association(agent.cluster_account.name)
            assert limit == "billing=15000" and usage == 0  # 250 GPU-hours, from zero
            own = f"{agent.name}-phase-1"
            exported = cli_as(agent, "votes", "export")
            assert exported.returncode == 0, exported.stderr
            rows = [json.loads(line) for line in exported.stdout.splitlines()]
            assert rows and all(own in (r["model_a"], r["model_b"]) for r in rows)
            fought = sum(v.counted and own in v.reveal.values() for v in report.votes)
            assert len(rows) == fought == FeedbackBundle.objects.get(agent=agent).battles
            files = Path(agent.sandbox) / "feedback" / "phase-1" / "battles.jsonl"
            assert len(files.read_text().splitlines()) == fought

        codes = agents_run(
            agents, 2, say, base=shared_models / "base", recipes=RECIPES, extra=PHASE2
        )
        assert codes == {"e2e_full": 0, "e2e_lora": 0}
        phase_end_now(Phase.objects.get(pk=phase_2.pk))
        phases_tick(engine=engine)
        assert "e2e_full-phase-2" in servers.sync()
        assert (
            not PhaseContestant.objects.filter(phase=phase_1, contestant__active=True)
            .filter(role="nominee")
            .exists()
        )
        report = crowd_run(url=arena.url, voters=3, battles=16, seed=2, max_seconds=240)
        assert len(report.votes) == 16, report.summary()
        snapshot = phase_leaderboard_fit(phase="phase-2")
        assert snapshot is not None
        ranked = {row["model"] for row in snapshot.raw["scores"]}
        assert {"e2e_full-phase-2", "e2e_lora-phase-2"} <= ranked
    finally:
        servers.stop()
