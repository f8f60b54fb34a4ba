"""Many simultaneous battle starts against the rate limits, each on its own database
connection, as concurrent requests to the site are."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from arena.battles.models import Battle
from arena.battles.services import BattleRefused, battle_create
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

STARTS = 12
LIMIT = 3


def start_together(voters: list[str], ips: list[str]) -> list[str]:
    """Start one battle per (voter, ip) at the same moment; each thread's outcome."""
    start = threading.Barrier(len(voters))

    def attempt(voter: str, ip: str) -> str:
        try:
            start.wait()
            battle_create(prompt="Hello", voter_key=factories.voter_key(voter), ip_hash=ip)
            return "started"
        except BattleRefused as refused:
            return refused.code
        finally:
            connection.close()  # each thread opened its own connection

    with ThreadPoolExecutor(max_workers=len(voters)) as pool:
        return list(pool.map(attempt, voters, ips))


def test_concurrent_starts_by_one_voter_stop_exactly_at_the_limit(settings):
    settings.ARENA_BATTLES_PER_MINUTE = LIMIT
    factories.contestant()
    factories.contestant()

    outcomes = start_together(["eager"] * STARTS, [f"ip-{i}" for i in range(STARTS)])

    assert sorted(outcomes) == ["rate_limited"] * (STARTS - LIMIT) + ["started"] * LIMIT
    assert Battle.objects.count() == LIMIT


def test_concurrent_starts_from_one_network_stop_exactly_at_the_limit(settings):
    settings.ARENA_BATTLES_PER_MINUTE_PER_IP = LIMIT
    factories.contestant()
    factories.contestant()

    outcomes = start_together([f"voter-{i}" for i in range(STARTS)], ["office"] * STARTS)

    assert sorted(outcomes) == ["rate_limited"] * (STARTS - LIMIT) + ["started"] * LIMIT
    assert Battle.objects.count() == LIMIT
