"""Provisioning on the real machine: Unix users, 0700 sandboxes, Slurm accounts, tokens."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agents.models import AgentToken
from agents.sandboxes import UnixSandboxes
from agents.selectors import agent_for_token
from agents.services import agent_deprovision, agent_provision
from cluster.reasons import submit_error
from cluster.slurm import cli
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")


@pytest.fixture
def provision(slurm):
    sandboxes = UnixSandboxes(ROOT)
    made = []

    def make(name):
        done = agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        made.append(name)
        return done

    yield make
    for name in made:
        agent_deprovision(name=name, sandboxes=sandboxes, backend=slurm)


def as_user(user, *command, cwd="/tmp"):
    return cli.run(list(command), user=user, cwd=cwd, check=False)


def test_two_agents_are_isolated_in_files_accounts_and_tokens(provision):
    alice, bob = provision("iso_alice"), provision("iso_bob")
    a_home, b_home = Path(alice.agent.sandbox), Path(bob.agent.sandbox)

    for done, home in ((alice, a_home), (bob, b_home)):
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert home.owner() == done.agent.unix_user
        assert stat.S_IMODE(done.config_path.stat().st_mode) == 0o600
        config = done.config_path.read_text()
        assert (
            f"ARENA_TOKEN={done.api_token}" in config
            and f"OPENAI_API_KEY={done.proxy_token}" in config
            and f"ANTHROPIC_API_KEY={done.proxy_token}" in config
            and "ANTHROPIC_BASE_URL=" in config
        )

    # Files: alice can neither list nor read bob's sandbox.
    assert as_user(alice.agent.unix_user, "ls", str(b_home)).stderr.count("Permission denied") == 1
    assert "Permission denied" in as_user(alice.agent.unix_user, "cat", str(bob.config_path)).stderr
    # Slurm: alice may submit under her account, not bob's.
    mine = as_user(alice.agent.unix_user, "sbatch", "--parsable", f"--account={alice.agent.cluster_account}",
                   "-t", "1", f"--chdir={a_home}", "--wrap", "true", cwd=str(a_home))  # fmt: skip
    assert mine.stdout.strip().isdigit()
    theirs = as_user(alice.agent.unix_user, "sbatch", f"--account={bob.agent.cluster_account}",
                     "-t", "1", f"--chdir={a_home}", "--wrap", "true", cwd=str(a_home))  # fmt: skip
    assert submit_error(theirs.stderr) == "you may not submit under that account"
    # Tokens: each authenticates its own agent, for its own purpose only.
    assert agent_for_token(alice.api_token, kind="api") == alice.agent
    assert agent_for_token(alice.proxy_token, kind="proxy") == alice.agent
    assert agent_for_token(alice.api_token, kind="proxy") is None
    assert AgentToken.objects.filter(agent=bob.agent).values_list("digest", flat=True).count() == 2
    assert bob.api_token not in str(list(AgentToken.objects.values_list("digest", flat=True)))


def test_deprovisioning_revokes_tokens_jobs_and_login(provision, slurm):
    carol = provision("iso_carol")
    home = Path(carol.agent.sandbox)
    user = carol.agent.unix_user
    agent_deprovision(name="iso_carol", sandboxes=UnixSandboxes(ROOT), backend=slurm)

    assert agent_for_token(carol.api_token, kind="api") is None
    assert agent_for_token(carol.proxy_token, kind="proxy") is None
    refused = as_user(
        user, "sbatch", f"--account={carol.agent.cluster_account}", "-t", "1", "--wrap", "true"
    )
    assert refused.stdout.strip() == ""
    assert (home / ".arena" / "config").exists(), "files stay for the audit"
    # Provisioning again brings the agent back with new credentials.
    again = provision("iso_carol")
    assert again.api_token != carol.api_token
    assert agent_for_token(again.api_token, kind="api") == again.agent


def test_an_agent_joining_a_running_phase_gets_its_budgets(provision):
    from decimal import Decimal

    from cluster.models import ClusterAccount
    from tests.factories import running_phase

    phase = running_phase(label="phase-join")
    phase.gpu_hours, phase.storage_gib, phase.api_credit_usd = Decimal("250"), 100, Decimal("5")
    phase.save()
    dave = provision("join_dave")

    account = ClusterAccount.objects.get(name=dave.agent.cluster_account)
    assert (account.period, account.gpu_hours_limit, account.storage_gib_limit) == (
        "phase-join",
        Decimal("250"),
        100,
    )
    assert dave.agent.credit_limit == Decimal("5")
    rows = cli.sacctmgr_rows(
        "assoc", ["user", "grptresmins"], f"account={dave.agent.cluster_account}"
    )
    assert [row["grptresmins"] for row in rows if not row["user"]] == ["billing=15000"]
