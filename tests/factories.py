"""Small factories for the rows most tests need."""

from __future__ import annotations

from datetime import timedelta
from itertools import count

from django.utils import timezone

from arena.battles.models import Answer, Battle
from arena.battles.services import salted_hash
from arena.serving.client import Endpoint
from arena.serving.models import Contestant
from arena.serving.services import contestant_register

_numbers = count(1)

# A nomination's model card with every field the audit reads.
MODEL_CARD = """---
training_method: full SFT
steps: 250
gpu_hours: 1.5
hardware: 2 x H100
datasets: [generated:tiny-chats]
---
# My model
It stops at the end of its turn.
"""


def contestant(
    name: str | None = None,
    *,
    endpoint: Endpoint | None = None,
    weight: float = 1.0,
    active: bool = True,
    identity_words: list[str] | None = None,
) -> Contestant:
    name = name or f"model-{next(_numbers)}"
    return contestant_register(
        display_name=name,
        endpoint=endpoint or Endpoint(base_url="http://127.0.0.1:9/v1", model=f"/models/{name}"),
        weight=weight,
        active=active,
        identity_words=identity_words,
    )


def voter_key(voter: str = "voter-1") -> str:
    """The key the site derives from a session holding `voter` (see frontend/voters.py)."""
    return salted_hash("voter", voter)


def complete_battle(
    *,
    voter: str = "voter-1",
    a: Contestant | None = None,
    b: Contestant | None = None,
    texts: tuple[str, str] = ("Answer A.", "Answer B."),
    void_reason: str = "",
    seconds_ago: float = 60.0,
    state: str = Battle.State.COMPLETE,
) -> Battle:
    a = a or contestant()
    b = b or contestant()
    battle = Battle.objects.create(
        prompt="What is 2 plus 2?",
        voter_key=voter_key(voter),
        ip_hash=salted_hash("ip", "127.0.0.1"),
        state=state,
        void_reason=void_reason,
        completed_at=timezone.now() - timedelta(seconds=seconds_ago),
    )
    for side, who, text in (("a", a, texts[0]), ("b", b, texts[1])):
        Answer.objects.create(
            battle=battle,
            side=side,
            contestant=who,
            text=text,
            finish_reason="stop",
            tokens=3,
            header_counts={f"h{i}": 0 for i in range(1, 7)},
            list_counts={"ordered": 0, "unordered": 0},
            bold_counts={"**": 0, "__": 0},
        )
    return battle


def round_robin_votes(names: tuple[str, ...], n: int, choose) -> list[Contestant]:
    """`n` counted votes among the named contestants, pairs in turn; `choose(i)` is vote i."""
    from arena.battles.services import vote_record

    players = [contestant(name) for name in names]
    pairs = [(players[i], players[(i + 1) % len(players)]) for i in range(len(players))]
    for i in range(n):
        a, b = pairs[i % len(pairs)]
        battle = complete_battle(a=a, b=b)
        vote_record(battle_id=battle.pk, choice=choose(i), voter_key=voter_key(), ip_hash="ip")
    return players


def round_vote(targeted, *, a_wins, a_tokens, b_tokens, a_first, voter=None, **battle):
    """One battle of a targeted round, complete and voted by `voter` (one of its own if not
    given): the round's A on side A if `a_first`, each answer `*_tokens` long, and `a_wins`
    True, False, "tie" or "bothbad". `battle` sets Battle fields (`leaked_sides`, ...)."""
    from arena.battles.services import vote_record

    contestant_a, contestant_b = targeted.contestant_a, targeted.contestant_b
    made = complete_battle(
        voter=voter or f"round-voter-{next(_numbers)}",
        a=contestant_a if a_first else contestant_b,
        b=contestant_b if a_first else contestant_a,
    )
    Battle.objects.filter(pk=made.pk).update(targeted_round=targeted, **battle)
    Answer.objects.filter(battle=made, contestant=contestant_a).update(tokens=a_tokens)
    Answer.objects.filter(battle=made, contestant=contestant_b).update(tokens=b_tokens)
    side_of_a, side_of_b = ("a", "b") if a_first else ("b", "a")
    choice = {True: side_of_a, False: side_of_b}.get(a_wins, a_wins)
    vote_record(battle_id=made.pk, choice=choice, voter_key=made.voter_key, ip_hash="ip")
    return made


def running_phase(name: str = "test", label: str = "phase-1"):
    """A competition whose first phase is running (agents train and may nominate)."""
    from arena.competition.models import Competition, Phase

    competition = Competition.objects.create(name=name, base_model="/models/base")
    now = timezone.now()
    return Phase.objects.create(
        competition=competition, number=1, label=label, state=Phase.State.RUNNING,
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=6),
    )  # fmt: skip


def eval_run(
    phase,
    role: str,
    scores: dict[str, float],
    *,
    agent=None,
    checkpoint=None,
    label: str = "",
    stderr: float | None = 0.01,
    n: int = 100,
    judge_model: str = "",
    items: dict[str, list[float]] | None = None,
):
    """A collected evaluation run: one model's scores on the named benchmarks, each the mean
    of `n` items with standard error `stderr`, as `evaluations_collect` leaves them. A
    benchmark in `items` has those per-item values stored (items "0", "1", ...), its score,
    standard error and n computed from them as the runner does (`scores` is then ignored)."""
    from evalsuite.metrics import mean_and_stderr
    from evalsuite.models import BenchmarkResult, EvalRun, ItemResult
    from evalsuite.registry import benchmark

    run = EvalRun.objects.create(
        phase=phase, role=role, agent=agent, checkpoint=checkpoint, model_label=label or role,
        base_url="http://127.0.0.1:9/v1", served_model_name=label or role,
        benchmarks=list(scores), judge_model=judge_model, log_dir="", state=EvalRun.State.DONE,
    )  # fmt: skip
    for name, score in scores.items():
        entry = benchmark(name)
        values = (items or {}).get(name)
        stored = (score, stderr, n) if values is None else (*mean_and_stderr(values), len(values))
        result = BenchmarkResult.objects.create(
            run=run, benchmark=name, domain=entry.domain, kind=entry.kind,
            held_out=entry.held_out, score=stored[0], stderr=stored[1], n=stored[2],
            judge_model=judge_model if entry.scorer == "judge" else "",
        )  # fmt: skip
        for i, value in enumerate(values or []):
            ItemResult.objects.create(result=result, item_id=str(i), value=value)
    return run


def agent_with_gpu_hours(name: str, gpu_hours: dict[str, float]):
    """An agent whose cluster account was charged these GPU-hours per budget period (phase
    label), as the ledger stands after its jobs."""
    from decimal import Decimal

    from agents.models import Agent
    from cluster.models import ClusterAccount, GpuLedger

    account = ClusterAccount.objects.create(
        name=f"acct_{name}", unix_user=f"agent_{name}", period=next(iter(gpu_hours), ""),
        gpu_hours_limit=Decimal(1000), max_gpus=8, max_preemptible_gpus=8, max_job_hours=24,
        storage_gib_limit=400,
    )  # fmt: skip
    for period, hours in gpu_hours.items():
        GpuLedger.objects.create(account=account, period=period, gpu_seconds=round(hours * 3600))
    return Agent.objects.create(name=name, cluster_account=account)


def rating_snapshot(phase_label: str, style: dict[str, float], raw: dict[str, float] | None = None):
    """The fit of one phase's votes, as saved when the phase closes: ratings by model."""
    from arena.leaderboard.models import RatingSnapshot

    def table(scores: dict[str, float]) -> dict:
        return {"scores": [{"model": m, "score": s} for m, s in scores.items()]}

    return RatingSnapshot.objects.create(
        source=RatingSnapshot.Source.PHASE, phase=phase_label, n_battles=100,
        style=table(style), raw=table(raw if raw is not None else style),
    )  # fmt: skip
