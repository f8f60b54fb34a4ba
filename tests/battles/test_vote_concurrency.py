"""Many simultaneous vote requests on one battle, against the real server and database."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx2

from arena.battles.models import Vote
from tests import factories
from tests.support.voter import HttpVoter


def fire_together(voter: HttpVoter, battle_id: str, choices: list[str]) -> list[httpx2.Response]:
    start = threading.Barrier(len(choices))
    # One client per thread, all holding the same session and CSRF cookies.
    clients = [
        httpx2.Client(base_url=voter.base_url, cookies=voter.client.cookies, timeout=60)
        for _ in choices
    ]

    def send(index: int) -> httpx2.Response:
        start.wait()
        return clients[index].post(
            f"/api/battles/{battle_id}/vote",
            json={"choice": choices[index]},
            headers={"X-CSRFToken": voter.csrf, "Referer": voter.base_url + "/"},
        )

    with ThreadPoolExecutor(max_workers=len(choices)) as pool:
        replies = list(pool.map(send, range(len(choices))))
    for client in clients:
        client.close()
    return replies


def test_fifty_identical_concurrent_votes_leave_exactly_one(arena):
    voter = HttpVoter.arrive(arena.url)
    battle = factories.complete_battle(voter=voter.voter_id)

    replies = fire_together(voter, battle.pk, ["a"] * 50)

    assert [r.status_code for r in replies] == [200] * 50
    assert len({r.text for r in replies}) == 1  # every retry got the same answer
    assert Vote.objects.filter(battle=battle).count() == 1


def test_fifty_conflicting_concurrent_votes_leave_exactly_one(arena):
    voter = HttpVoter.arrive(arena.url)
    battle = factories.complete_battle(voter=voter.voter_id)
    choices = ["a", "b", "tie", "bothbad"] * 12 + ["a", "b"]

    replies = fire_together(voter, battle.pk, choices)

    vote = Vote.objects.get(battle=battle)
    assert Vote.objects.count() == 1
    for choice, reply in zip(choices, replies, strict=True):
        expected = 200 if choice == vote.choice else 409
        assert reply.status_code == expected, reply.text
