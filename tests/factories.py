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


def running_phase(name: str = "test", label: str = "phase-1"):
    """A competition whose first phase is running (agents train and may nominate)."""
    from arena.competition.models import Competition, Phase

    competition = Competition.objects.create(name=name, base_model="/models/base")
    now = timezone.now()
    return Phase.objects.create(
        competition=competition, number=1, label=label, state=Phase.State.RUNNING,
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=6),
    )  # fmt: skip
