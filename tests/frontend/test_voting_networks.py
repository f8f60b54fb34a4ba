"""Issue 13, item 6: agents are kept off the voting path by configuration. On a real deployment
the agents' hosts and the cluster's networks are listed in ARENA_VOTING_DENIED_NETWORKS, and
the voting site (page, prompts, battles, votes) refuses them, while voters elsewhere and the
agent API are unaffected."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from arena.battles.models import Battle
from frontend.middleware import denied_networks
from tests import factories

pytestmark = pytest.mark.django_db

AGENTS = ["10.20.0.0/16", "fd00:a9e7::/32"]


@pytest.fixture
def closed_to_agents(settings):
    settings.ARENA_VOTING_DENIED_NETWORKS = AGENTS
    factories.contestant("left-model")
    factories.contestant("right-model")


def client_at(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def start_battle(client: Client):
    return client.post(
        "/api/battles", json.dumps({"prompt": "Hello"}), content_type="application/json"
    )


@pytest.mark.parametrize("address", ["10.20.3.4", "::ffff:10.20.3.4", "fd00:a9e7::5"])
def test_an_agent_network_gets_no_page_no_battle_and_no_vote(closed_to_agents, address):
    agent = client_at(address)
    for reply in (
        agent.get("/"),
        agent.get("/api/prompts/suggest"),
        start_battle(agent),
        agent.post("/api/battles/anything/vote", {"choice": "a"}),
    ):
        assert reply.status_code == 403
        assert reply.json()["code"] == "voting_network_denied"
    assert not Battle.objects.exists()


def test_voters_elsewhere_and_the_leaderboard_are_unaffected(closed_to_agents):
    voter = client_at("192.0.2.7")
    assert voter.get("/").status_code == 200
    assert start_battle(voter).status_code == 201
    assert client_at("10.20.3.4").get("/api/leaderboard").status_code == 200


def test_without_denied_networks_every_address_may_vote(settings):
    settings.ARENA_VOTING_DENIED_NETWORKS = []
    assert client_at("10.20.3.4").get("/").status_code == 200


def test_a_malformed_network_stops_the_site_at_startup():
    with pytest.raises(ImproperlyConfigured, match="not a network"):
        denied_networks(["10.20.0.0/16", "agents"])
