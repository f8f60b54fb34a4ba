"""A competition as a file: both formats read the same, every mistake is named with its key
path, applying is idempotent and all-or-nothing, a phase under way refuses what it forbids,
and what the file declares takes effect (budgets on the ledgers, arena settings on battles)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from agents.models import Agent
from arena.battles.services import BattleRefused, battle_create, salted_hash, vote_record
from arena.competition.models import Competition, CompetitionAgent, Phase
from arena.competition.selectors import arena_settings_current
from arena.phases.competition_file import (
    CompetitionFileError,
    competition_apply,
    competition_diff,
    competition_file_load,
    competition_spec_parse,
)
from arena.phases.services import Engine
from cluster.backends.local import LocalBackend
from cluster.models import ClusterAccount
from evalsuite.registry import benchmarks
from tests import factories
from tests.support.workers import agent_user

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "infra" / "competitions" / "example.toml"
DEMO = ROOT / "infra" / "competitions" / "demo.toml"

CUP_TOML = """
[competition]
name = "cup"
base_model = "/models/base"
instruct_model = "/models/instruct"

[[agents]]
name = "alpha"
model = "gpt-5"
scaffold_budget_usd = 80

[[agents]]
name = "beta"
harness = "command"
model = "claude-sonnet"
command = ["claude", "-p", "do; the task"]

[[phases]]
starts_at = "2030-01-01T09:00:00+01:00"
length = "6d"
arena_length = "1d"
gpu_hours = 1000
api_credit_usd = 300

[[phases]]
length = "3d"
arena_closes_at = 2030-01-12T18:00:00Z
gpu_hours = 500.5

[benchmarks]
include = ["mmlu", "gsm8k"]

[arena]
max_tokens = 512
min_vote_seconds = 1.5
"""

CUP_YAML = """
competition:
  name: cup
  base_model: /models/base
  instruct_model: /models/instruct
agents:
  - {name: alpha, model: gpt-5, scaffold_budget_usd: 80}
  - name: beta
    harness: command
    model: claude-sonnet
    command: [claude, -p, "do; the task"]
phases:
  - {starts_at: "2030-01-01T09:00:00+01:00", length: 6d, arena_length: 1d,
     gpu_hours: 1000, api_credit_usd: 300}
  - {length: 3d, arena_closes_at: 2030-01-12T18:00:00Z, gpu_hours: 500.5}
benchmarks:
  include: [mmlu, gsm8k]
arena:
  max_tokens: 512
  min_vote_seconds: 1.5
"""


def write(tmp_path: Path, text: str, name: str = "cup.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cup(tmp_path: Path, text: str = CUP_TOML):
    return competition_file_load(write(tmp_path, text))


def edited(old: str, new: str, text: str = CUP_TOML) -> str:
    assert old in text
    return text.replace(old, new, 1)


# --- reading -------------------------------------------------------------------------------
def test_toml_and_yaml_declare_the_same_competition(tmp_path):
    from_toml = cup(tmp_path)
    from_yaml = competition_file_load(write(tmp_path, CUP_YAML, "cup.yaml"))
    assert from_toml == from_yaml
    assert from_toml.agents[1].command == ("claude", "-p", "do; the task")
    assert from_toml.phases[1].gpu_hours == Decimal("500.5")
    assert from_toml.benchmarks == ("gsm8k", "mmlu")  # in the registry's order
    assert from_toml.arena == {"max_tokens": 512, "min_vote_seconds": 1.5}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('name = "alpha"', 'name = "Alpha!"', "agents[0].name = 'Alpha!': must be a lowercase"),
        ('harness = "command"', 'harness = "bash"', "agents[1].harness = 'bash': must be one of"),
        ('command = ["claude", "-p", "do; the task"]', 'command = "claude -p"',
         "agents[1].command = 'claude -p': must be a non-empty list of strings"),
        ('command = ["claude", "-p", "do; the task"]', "",
         "agents[1].command: missing (harness = 'command' runs it)"),
        ('model = "gpt-5"', "", "agents[0].model: missing (the 'arena' harness calls it)"),
        ("scaffold_budget_usd = 80", "scaffold_budget_usd = -1",
         "agents[0].scaffold_budget_usd = -1: must be a finite number, at least 0"),
        ("gpu_hours = 1000", "gpu_hour = 1000", "phases[1].gpu_hour = 1000: unknown key (known:"),
        ("gpu_hours = 1000", "gpu_hours = 10.125",
         "phases[1].gpu_hours = 10.125: at most two decimals"),
        ("gpu_hours = 1000", 'gpu_hours = "1000"', "phases[1].gpu_hours = '1000': must be a number"),
        ('starts_at = "2030-01-01T09:00:00+01:00"', 'starts_at = "2030-01-01T09:00:00"',
         "phases[1].starts_at = '2030-01-01T09:00:00': has no zone"),
        ('starts_at = "2030-01-01T09:00:00+01:00"', "starts_at = 2030-01-01",
         "phases[1].starts_at = datetime.date(2030, 1, 1): a date without a time"),
        ('starts_at = "2030-01-01T09:00:00+01:00"', "",
         'phases[1].starts_at: missing (a date and time with a zone, or "now")'),
        ('length = "6d"', 'length = "6 days"', "phases[1].length = '6 days': must be a length"),
        ('length = "6d"', "", "phases[1]: give either ends_at or length (one of them)"),
        ('length = "3d"', 'length = "3d"\narena_length = "1d"',
         "phases[2]: give arena_closes_at or arena_length, not both"),
        ('arena_length = "1d"', 'arena_length = "1d"\nfeedback = "all"',
         "phases[1].feedback = 'all': must be one of none, own_battles"),
        ('include = ["mmlu", "gsm8k"]', 'include = ["mmlu", "gsm8kk"]',
         "benchmarks.include[1] = 'gsm8kk': unknown benchmark (known: gsm8k, mmlu, "),
        ('include = ["mmlu", "gsm8k"]', "include = []",
         "benchmarks.include = []: must be a non-empty list of benchmark names"),
        ("max_tokens = 512", "max_token = 512", "arena.max_token = 512: unknown key (known: "),
        ("max_tokens = 512", "max_tokens = 0", "arena.max_tokens = 0: must be at least 1"),
        ("max_tokens = 512", "max_tokens = true", "arena.max_tokens = True: must be a whole number"),
        ('name = "cup"', 'name = "cup"\nrenamed_from = "x"', "competition.renamed_from = 'x': unknown key"),
        ("[benchmarks]", "[benchmark]", "benchmark = {'include': ['mmlu', 'gsm8k']}: unknown key"),
        ('name = "cup"', 'name = "cup"\nbase_architecture = "Nemotron-H"',
         "competition.base_architecture = 'Nemotron-H': must be a model_type such as nemotron_h"),
    ],
)  # fmt: skip
def test_each_mistake_is_named_with_its_key_path_and_value(tmp_path, old, new, message):
    with pytest.raises(CompetitionFileError) as refused:
        cup(tmp_path, edited(old, new))
    assert any(error.startswith(message) for error in refused.value.errors), refused.value.errors


def test_every_mistake_is_reported_at_once(tmp_path):
    text = edited("gpu_hours = 1000", "gpu_hour = 1000")
    text = edited('harness = "command"', 'harness = "bash"', text)
    text = edited("max_tokens = 512", "max_tokens = -5", text)
    text = edited('name = "beta"', 'name = "alpha"', text)
    with pytest.raises(CompetitionFileError) as refused:
        cup(tmp_path, text)
    assert [error.split(":")[0] for error in refused.value.errors] == [
        "agents[1].harness = 'bash'",
        "agents[1].command = ['claude', '-p', 'do; the task']",  # not a 'command' harness
        "agents[1].name = 'alpha'",  # declared twice
        "phases[1].gpu_hour = 1000",
        "arena.max_tokens = -5",
    ]


def test_a_file_that_does_not_parse_is_named(tmp_path):
    with pytest.raises(CompetitionFileError, match=r"cup.toml: not valid TOML"):
        cup(tmp_path, "[competition\n")
    with pytest.raises(CompetitionFileError, match=r"name it .toml, .yaml or .yml"):
        competition_file_load(write(tmp_path, CUP_TOML, "cup.txt"))


def test_yaml_is_read_safely(tmp_path):
    hostile = "competition: !!python/object/apply:os.system ['touch /tmp/pwned']\n"
    with pytest.raises(CompetitionFileError, match="not valid YAML"):
        competition_file_load(write(tmp_path, hostile, "cup.yaml"))


# --- applying ------------------------------------------------------------------------------
@pytest.mark.django_db
def test_applying_creates_the_competition_and_again_changes_nothing(tmp_path):
    spec = cup(tmp_path)
    changes = competition_apply(spec)
    assert [str(c).split(":")[0] for c in changes] == [
        "competition cup", "agent alpha", "agent beta", "phase 1 (phase-1)", "phase 2 (phase-2)",
    ]  # fmt: skip
    competition = Competition.objects.get(name="cup")
    one, two = competition.phases.order_by("number")
    assert one.starts_at == datetime(2030, 1, 1, 8, tzinfo=UTC)
    assert one.ends_at == datetime(2030, 1, 7, 8, tzinfo=UTC)
    assert one.arena_closes_at == datetime(2030, 1, 8, 8, tzinfo=UTC)
    assert two.starts_at == one.arena_closes_at  # no starts_at: when the arena before closes
    assert (two.feedback, two.gpu_hours) == ("own_battles", Decimal("500.5"))
    assert competition.benchmarks == ["gsm8k", "mmlu"]
    beta = competition.agents.get(name="beta")
    assert (beta.harness, beta.command) == ("command", ["claude", "-p", "do; the task"])

    assert competition_diff(spec) == []
    assert competition_apply(spec) == []


@pytest.mark.django_db
def test_the_base_architecture_is_stored_and_checked_against_a_local_base(
    tmp_path, tiny_nemotron_models
):
    base = tiny_nemotron_models / "base"
    declared = edited(
        'base_model = "/models/base"', f'base_model = "{base}"\nbase_architecture = "nemotron_h"'
    )
    competition_apply(cup(tmp_path, declared))
    assert Competition.objects.get(name="cup").base_architecture == "nemotron_h"

    wrong = edited('base_architecture = "nemotron_h"', 'base_architecture = "llama"', declared)
    with pytest.raises(CompetitionFileError) as refused:
        competition_apply(cup(tmp_path, wrong))
    assert refused.value.errors == [
        "competition.base_architecture = 'llama': the base model's config.json says model_type "
        "'nemotron_h'"
    ]
    assert Competition.objects.get(name="cup").base_architecture == "nemotron_h"  # nothing applied


@pytest.mark.django_db
def test_now_is_read_once_so_a_later_apply_moves_nothing(tmp_path):
    spec = competition_file_load(DEMO)
    first = timezone.now()
    competition_apply(spec, now=first)
    dates = list(Phase.objects.values_list("starts_at", "ends_at", "arena_closes_at"))
    assert dates[0][0] == first and dates[0][1] == first + timedelta(hours=6)
    assert dates[1][0] == first + timedelta(hours=7)  # 6 h of training, 1 h of arena

    a_day_later = first + timedelta(days=1)
    assert competition_diff(spec, now=a_day_later) == []
    assert competition_apply(spec, now=a_day_later) == []
    assert list(Phase.objects.values_list("starts_at", "ends_at", "arena_closes_at")) == dates


@pytest.mark.django_db
def test_the_diff_says_what_would_change_in_words(tmp_path):
    competition_apply(cup(tmp_path))
    text = edited("gpu_hours = 500.5", "gpu_hours = 600")
    text = edited('model = "gpt-5"', 'model = "gpt-5-mini"', text)
    text = edited("min_vote_seconds = 1.5", "", text)
    text = edited('name = "beta"', 'name = "gamma"', text)
    changes = competition_diff(cup(tmp_path, text))
    assert [str(change) for change in changes] == [
        "competition cup: arena_settings max_tokens=512, min_vote_seconds=1.5 -> max_tokens=512",
        "agent alpha: model gpt-5 -> gpt-5-mini",
        "agent gamma: created (harness command; model claude-sonnet;"
        ' command ["claude", "-p", "do; the task"]; scaffold_budget_usd 50)',
        "agent beta: removed",
        "phase 2 (phase-2): gpu_hours 500.50 -> 600",
    ]
    assert Phase.objects.get(label="phase-2").gpu_hours == Decimal("500.5")  # a diff writes nothing


@pytest.mark.django_db
def test_dates_that_do_not_fit_together_are_errors(tmp_path):
    text = edited('length = "3d"', 'starts_at = "2030-01-05T00:00:00Z"\nlength = "3d"')
    with pytest.raises(CompetitionFileError) as refused:
        competition_diff(cup(tmp_path, text))
    assert refused.value.errors[0].startswith(
        "phases[2]: starts 2030-01-05T00:00:00+00:00, before phase 1 ends"
    )


# --- what a phase under way forbids ------------------------------------------------------
def running(competition_name: str = "cup") -> Phase:
    """Phase 1 started an hour ago (dates and state as the engine leaves them)."""
    now = timezone.now()
    phase = Phase.objects.get(competition__name=competition_name, number=1)
    Phase.objects.filter(pk=phase.pk).update(
        state=Phase.State.RUNNING, starts_at=now - timedelta(hours=1),
        ends_at=now + timedelta(days=6), arena_closes_at=now + timedelta(days=7),
    )  # fmt: skip
    phase.refresh_from_db()
    # Phase 2 starts when phase 1's arena closes, as the file says.
    Phase.objects.filter(competition__name=competition_name, number=2).update(
        starts_at=phase.arena_closes_at, ends_at=phase.arena_closes_at + timedelta(days=3)
    )
    return phase


def file_of(phase: Phase) -> str:
    """CUP_TOML with phase 1's dates as they stand, so only what a test changes differs."""
    return edited(
        'starts_at = "2030-01-01T09:00:00+01:00"\nlength = "6d"\narena_length = "1d"',
        f'starts_at = "{phase.starts_at.isoformat()}"\nends_at = "{phase.ends_at.isoformat()}"\n'
        f'arena_closes_at = "{phase.arena_closes_at.isoformat()}"',
    )


@pytest.mark.django_db
def test_a_running_phase_refuses_what_it_forbids_and_nothing_is_applied(tmp_path):
    factories.agent_with_gpu_hours("alpha", {"phase-1": 300.0})
    competition_apply(cup(tmp_path))
    phase = running()
    text = file_of(phase)
    assert competition_diff(cup(tmp_path, text)) == []
    text = edited("[[phases]]\n", '[[phases]]\nlabel = "first"\nfeedback = "own_battles"\n', text)
    text = edited(
        phase.starts_at.isoformat(), (phase.starts_at - timedelta(hours=2)).isoformat(), text
    )
    text = edited(
        phase.ends_at.isoformat(), (timezone.now() - timedelta(minutes=1)).isoformat(), text
    )
    text = edited("gpu_hours = 1000", "gpu_hours = 200", text)  # alpha used 300 of it
    text = edited('base_model = "/models/base"', 'base_model = "/models/other"', text)
    text = edited('name = "beta"', 'name = "gamma"', text)

    spec = cup(tmp_path, text)
    refused = {(c.subject, c.what): c.refused for c in competition_diff(spec) if c.refused}
    assert refused == {
        ("competition cup", "base_model"): (
            "phase 1 has started: every agent trains from, and is measured against, it"
        ),
        (
            "agent beta",
            "removed",
        ): "phase 1 has started: take an agent out with `agents deprovision`",
        ("phase 1 (phase-1)", "label"): (
            "it is running: the label names its budget period, its battles and its models"
        ),
        ("phase 1 (phase-1)", "starts_at"): "it is running: it has started",
        ("phase 1 (phase-1)", "ends_at"): "it runs: it cannot end in the past",
        ("phase 1 (phase-1)", "feedback"): "it is running: its feedback went out when it started",
        ("phase 1 (phase-1)", "gpu_hours"): "it runs: an agent has used 300.00 of it",
    }
    with pytest.raises(CompetitionFileError) as error:
        competition_apply(spec)
    assert len(error.value.errors) == 7
    assert Competition.objects.get(name="cup").base_model == "/models/base"
    assert CompetitionAgent.objects.filter(name="gamma").count() == 0  # all or nothing
    assert Phase.objects.get(pk=phase.pk).gpu_hours == Decimal(1000)


@pytest.mark.django_db
def test_removing_a_started_phase_and_a_second_competition_are_refused(tmp_path):
    competition_apply(cup(tmp_path))
    phase = running()
    text = file_of(phase)
    phase_2 = text[text.index('[[phases]]\nlength = "3d"') : text.index("[benchmarks]")]
    one_phase = text.replace(phase_2, "")
    # Dropping phase 2 (scheduled) is allowed; dropping phase 1 (running) is not.
    words = [str(c) for c in competition_diff(cup(tmp_path, one_phase))]
    assert words == ["phase 2 (phase-2): removed"]
    other = edited('name = "cup"', 'name = "cup-2"')
    [created, *_] = competition_diff(cup(tmp_path, other))
    assert created.refused.startswith("competition 'cup' is under way: the platform runs one")


@pytest.mark.django_db
def test_raising_a_running_phase_budget_reaches_the_agents_ledgers_and_accounts(tmp_path):
    competition_apply(cup(tmp_path))
    phase = running()
    agent = factories.agent_with_gpu_hours("alpha", {"phase-1": 300.0})
    Agent.objects.filter(pk=agent.pk).update(
        credit_limit=Decimal("310"), credit_spent=Decimal("40"), unix_user="agent_alpha"
    )  # $10 left from before the phase, $300 granted, $30 of it spent
    text = edited("gpu_hours = 1000", "gpu_hours = 1200", file_of(phase))
    text = edited("api_credit_usd = 300", "api_credit_usd = 350", text)
    backend = LocalBackend(log_dir=tmp_path / "cluster")
    competition_apply(cup(tmp_path, text), engine=Engine(cluster=backend))
    assert Agent.objects.get(pk=agent.pk).credit_limit == Decimal("360")
    account = ClusterAccount.objects.get(name=agent.cluster_account)
    assert (account.gpu_hours_limit, account.period) == (Decimal("1200"), "phase-1")
    limits = json.loads((tmp_path / "cluster" / "accounts" / f"{account.name}.json").read_text())
    assert limits["gpu_hours"] == 1200.0

    # Lowering the credit below what alpha used of it ($30) is refused; to $30 is allowed.
    lower = edited("api_credit_usd = 350", "api_credit_usd = 29.99", text)
    [change] = competition_diff(cup(tmp_path, lower))
    assert change.refused == "it runs: an agent has used 30.00 of it"
    competition_apply(cup(tmp_path, edited("29.99", "30", lower)), engine=Engine(cluster=backend))
    assert Agent.objects.get(pk=agent.pk).credit_limit == Decimal("40")


@pytest.mark.django_db
def test_a_frozen_phase_keeps_its_dates_but_its_arena_may_stay_open_longer(tmp_path):
    competition_apply(cup(tmp_path))
    phase = running()
    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.SERVING)
    text = file_of(phase)
    later_close = phase.arena_closes_at + timedelta(hours=5)
    longer = edited(phase.arena_closes_at.isoformat(), later_close.isoformat(), text)
    competition_apply(cup(tmp_path, longer))
    assert Phase.objects.get(pk=phase.pk).arena_closes_at == later_close
    shorter = edited(
        phase.ends_at.isoformat(), (phase.ends_at - timedelta(hours=1)).isoformat(), longer
    )
    [change] = competition_diff(cup(tmp_path, shorter))
    assert change.refused == "it is serving: its training is over"
    benchmarks_changed = edited('include = ["mmlu", "gsm8k"]', 'include = ["mmlu"]', longer)
    [change] = competition_diff(cup(tmp_path, benchmarks_changed))
    assert change.refused.startswith("a phase was served and evaluated on them")


@pytest.mark.django_db
def test_a_provisioned_agent_gets_its_scaffold_budget_never_below_its_spending(tmp_path):
    Agent.objects.create(name="alpha", scaffold_credit_limit=Decimal("0"))
    changes = competition_apply(cup(tmp_path))
    assert "agent alpha: scaffold budget in force $0.00 -> $80.00" in [str(c) for c in changes]
    assert Agent.objects.get(name="alpha").scaffold_credit_limit == Decimal("80")
    Agent.objects.filter(name="alpha").update(scaffold_credit_spent=Decimal("60"))
    lower = cup(tmp_path, edited("scaffold_budget_usd = 80", "scaffold_budget_usd = 50"))
    assert [str(change) for change in competition_diff(lower)] == [
        "agent alpha: scaffold_budget_usd 80.00 -> 50",
        "agent alpha: scaffold budget in force $80.00 -> $50.00"
        "  REFUSED: it has spent and reserved $60.00 of it already",
    ]
    with pytest.raises(CompetitionFileError):
        competition_apply(lower)
    assert CompetitionAgent.objects.get(name="alpha").scaffold_budget_usd == Decimal("80")


# --- the arena settings take effect --------------------------------------------------------
@pytest.mark.django_db
def test_declared_arena_settings_govern_battles_and_votes_the_rest_come_from_settings(
    tmp_path, settings
):
    settings.ARENA_MIN_VOTE_SECONDS = 0.0
    settings.ARENA_BATTLES_PER_MINUTE = 10
    battle = factories.complete_battle(seconds_ago=5)
    ip = salted_hash("ip", "127.0.0.1")
    text = edited("min_vote_seconds = 1.5", "min_vote_seconds = 60\nbattles_per_minute = 1")
    competition_apply(cup(tmp_path, text))
    current = arena_settings_current()
    assert (current.max_tokens, current.min_vote_seconds, current.battles_per_minute) == (
        512,
        60,
        1,
    )
    assert current.temperature == settings.ARENA_TEMPERATURE  # not declared: settings.py
    with pytest.raises(BattleRefused) as refused:  # five seconds: settings.py would allow it
        vote_record(battle_id=battle.pk, choice="a", voter_key=battle.voter_key, ip_hash=ip)
    assert refused.value.code == "too_early"
    factories.contestant(), factories.contestant()
    battle_create(prompt="hi", voter_key="v", ip_hash=ip)
    with pytest.raises(BattleRefused) as refused:
        battle_create(prompt="hi again", voter_key="v", ip_hash=ip)
    assert refused.value.code == "rate_limited"


@pytest.mark.django_db
def test_only_the_declared_benchmarks_are_queued_when_a_phase_is_served(tmp_path, settings):
    from arena.phases.models import PhaseContestant
    from arena.phases.services import evaluations_queue_served
    from arena.serving.models import Contestant
    from evalsuite.models import EvalRun

    settings.VAR_DIR = tmp_path
    competition_apply(cup(tmp_path))
    phase = Phase.objects.get(competition__name="cup", number=1)
    Phase.objects.filter(pk=phase.pk).update(state=Phase.State.SERVING)
    base = factories.contestant("tiny-base")
    Contestant.objects.filter(pk=base.pk).update(checkpoint_path="/models/base")
    PhaseContestant.objects.create(
        phase=phase, contestant=base, role=PhaseContestant.Role.REFERENCE,
        checkpoint_path="/models/base",
    )  # fmt: skip
    # A scheduler that takes no job at all: the run is recorded, refused, and names its
    # benchmarks, with nothing left running.
    (run,) = evaluations_queue_served(backend=LocalBackend(log_dir=tmp_path / "jobs", max_queued=0))
    assert (run.state, run.role) == (EvalRun.State.FAILED, EvalRun.Role.BASE)
    assert run.benchmarks == ["gsm8k", "mmlu"]


# --- the command ---------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_command_shows_the_changes_applies_them_and_names_agents_to_provision(tmp_path, capsys):
    path = write(tmp_path, CUP_TOML)
    call_command("competition", "apply", str(path), "--dry-run")
    out = capsys.readouterr().out
    assert "  competition cup: created" in out and "dry run: 5 change(s), none applied" in out
    assert not Competition.objects.filter(name="cup").exists()

    call_command("competition", "apply", str(path))
    out = capsys.readouterr().out
    assert "cup: 5 change(s) applied" in out
    assert "not provisioned yet: alpha, beta" in out
    call_command("competition", "apply", str(path))
    assert "cup: nothing to change" in capsys.readouterr().out

    call_command("competition", "show", "cup")
    out = capsys.readouterr().out
    assert "  alpha            harness arena    model gpt-5" in out
    assert "scaffold $80.00  (not provisioned)" in out
    assert "  1 phase-1    scheduled 2030-01-01T08:00:00+00:00 -> 2030-01-07T08:00:00+00:00" in out
    assert "    1000.00 GPU-h, 8+8 preemptible GPUs, 24 h/job, 400 GiB, $300.00 API credit" in out
    assert "benchmarks (declared): gsm8k, mmlu" in out
    assert "  max_tokens                 512  (file)" in out
    call_command("competition", "show", "--json")
    plan = json.loads(capsys.readouterr().out)
    assert plan["phases"][1]["gpu_hours"] == "500.50"
    assert plan["arena"]["temperature"]["from"] == "settings"


@pytest.mark.django_db
def test_the_command_fails_with_every_error_and_every_refusal(tmp_path, capsys):
    bad = write(tmp_path, edited("gpu_hours = 1000", "gpu_hour = 1000"))
    with pytest.raises(CommandError) as failed:
        call_command("competition", "apply", str(bad))
    assert "1 error(s), nothing applied:\n  phases[1].gpu_hour = 1000: unknown key" in str(
        failed.value
    )

    call_command("competition", "apply", str(write(tmp_path, CUP_TOML)))
    moved = write(
        tmp_path, edited('base_model = "/models/base"', 'base_model = "/m/x"', file_of(running()))
    )
    with pytest.raises(CommandError, match=r"1 change\(s\) refused: nothing was applied"):
        call_command("competition", "apply", str(moved))
    assert (
        "base_model /models/base -> /m/x  REFUSED: phase 1 has started" in capsys.readouterr().out
    )
    with pytest.raises(CommandError, match="no competition named 'nope'"):
        call_command("competition", "show", "nope")


# --- the shipped files -------------------------------------------------------------------
@pytest.mark.django_db
def test_the_example_files_apply(tmp_path):
    example = competition_file_load(EXAMPLE)
    assert len(example.agents) == 10
    assert set(example.benchmarks) == {entry.name for entry in benchmarks()}
    competition_apply(example)
    competition = Competition.objects.get(name="rsi-arena-2027")
    assert competition.agents.count() == 10
    assert competition.phases.get(number=2).starts_at == datetime(2027, 3, 8, 8, tzinfo=UTC)
    assert competition_apply(example) == []

    demo = competition_file_load(DEMO)
    competition_apply(replace(demo, base_model="/tiny/base", instruct_model="/tiny/instruct"))
    competition = Competition.objects.get(name="demo")
    assert [(a.name, a.harness) for a in competition.agents.all()] == [
        ("ref_dpo", "none"),
        ("ref_lora", "none"),
        ("ref_sft", "none"),
        ("scout", "arena"),
    ]
    assert [p.feedback for p in competition.phases.order_by("number")] == ["none", "own_battles"]


@pytest.mark.slow
def test_the_demo_file_applies_on_embedded_sqlite(tmp_path):
    """`make demo` runs on SQLite: migrations, the apply and its idempotence, there too."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "REDIS_URL" and not key.startswith("PYTEST")
    }
    env["ARENA_VAR_DIR"] = str(tmp_path)
    env["DATABASE_URL"] = f"sqlite:///{tmp_path}/arena.sqlite3"  # an absolute path: ////

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=600, check=False,
        )  # fmt: skip

    assert manage("migrate", "--verbosity", "0").returncode == 0
    first = manage("competition", "apply", str(DEMO))
    assert first.returncode == 0, first.stderr
    assert "demo: 7 change(s) applied" in first.stdout
    again = manage("competition", "apply", str(DEMO))
    assert again.returncode == 0
    assert again.stdout.splitlines()[0] == "demo: nothing to change"
    bad = write(tmp_path, "[competition]\nname = 'x'\n")
    failed = manage("competition", "apply", str(bad))
    assert failed.returncode == 1
    assert "competition.base_model: missing" in failed.stderr
    shown = manage("competition", "show", "--json")
    assert json.loads(shown.stdout)["name"] == "demo"


@pytest.mark.slow
@pytest.mark.django_db
def test_provision_makes_the_declared_agents_and_sets_their_scaffold_budgets(
    tmp_path, settings, capsys
):
    """`--provision` (as root) provisions each declared agent not provisioned yet, a real
    Unix user with its sandbox, then sets its scaffold budget by applying the file again."""
    from agents.sandboxes import UnixSandboxes
    from agents.services import agent_deprovision

    settings.AGENTS_SANDBOX_ROOT = tmp_path / "sandboxes"
    text = CUP_TOML.replace('name = "alpha"', 'name = "cf_alpha"')
    text = text.replace('name = "beta"', 'name = "cf_beta"')
    Agent.objects.create(name="cf_beta", scaffold_credit_limit=Decimal("50"))  # already there
    try:
        call_command("competition", "apply", str(write(tmp_path, text)), "--provision")
        out = capsys.readouterr().out
        assert f"provisioned cf_alpha: sandbox {tmp_path}/sandboxes/{agent_user('cf_alpha')}" in out
        assert "  agent cf_alpha: scaffold budget in force $0.00 -> $80.00" in out
        assert "not provisioned yet" not in out
        alpha = Agent.objects.get(name="cf_alpha", active=True)
        assert alpha.scaffold_credit_limit == Decimal("80")
        assert Path(alpha.sandbox).stat().st_uid != 0  # its own Unix user's
    finally:
        if Agent.objects.filter(name="cf_alpha", active=True).exists():
            agent_deprovision(name="cf_alpha", sandboxes=UnixSandboxes(tmp_path / "sandboxes"))


@pytest.mark.django_db
def test_the_demo_starts_its_competition_from_its_file():
    """As before the file: two phases starting now, 6 h and 3 h, each followed by 1 h of
    arena, the first without feedback; its three reference agents run by hand, and the
    harness-driven agent run by the platform's own harness on the scripted model."""
    from arena.phases.demo import (
        DEMO_AGENTS,
        HARNESS_AGENT,
        HARNESS_MODEL,
        competition_start,
    )

    before = timezone.now()
    competition = competition_start(Path("/tiny/base"), Path("/tiny/instruct"))
    assert (competition.base_model, competition.instruct_model) == ("/tiny/base", "/tiny/instruct")
    one, two = competition.phases.order_by("number")
    assert before <= one.starts_at <= timezone.now()
    assert one.ends_at - one.starts_at == timedelta(hours=6)
    assert (one.arena_closes_at, two.starts_at) == (one.ends_at + timedelta(hours=1),) * 2
    assert two.ends_at - two.starts_at == timedelta(hours=3)
    assert two.arena_closes_at == two.ends_at + timedelta(hours=1)
    assert (one.feedback, two.feedback) == ("none", "own_battles")
    harnesses = {a.name: (a.harness, a.model) for a in competition.agents.all()}
    assert harnesses == {
        **dict.fromkeys(DEMO_AGENTS, ("none", "")),
        HARNESS_AGENT: ("arena", HARNESS_MODEL),
    }


def test_a_file_without_its_tables_says_what_is_missing():
    with pytest.raises(CompetitionFileError) as refused:
        competition_spec_parse(None)  # an empty YAML file
    assert refused.value.errors == [
        "competition.name: missing",
        "competition.base_model: missing",
        "phases: missing (declare at least one phase: [[phases]])",
    ]
    with pytest.raises(CompetitionFileError) as refused:
        competition_spec_parse([1])
    assert refused.value.errors[0] == "(the file) = [1]: must be a table"
