"""Issue 25, finding 14: an agent is a program and can call the platform in a loop. Before,
the agent API and the proxy took every request, each on a web worker the voters share, and
every call of a jobs route ran `sacct` on the controller. Now each agent has its own allowance
per window (counted in Redis, across the web workers): past it the agent gets 429 with
Retry-After and the others are served as before. A jobs route asks the scheduler about the
agent's own account only, at most once per `AGENTS_JOBS_SYNC_INTERVAL_S`."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.rate_limit import KEY_PREFIX, RedisRateLimiter, rate_limiter
from agents.services import judge_token_issue, scaffold_token_issue, token_issue
from cluster.backends.local import LocalBackend
from tests.evalsuite.on_demand_builders import provisioned

pytestmark = pytest.mark.django_db

ALLOWED = 5


@pytest.fixture
def limits(settings):
    settings.AGENTS_API_RATE = settings.AGENTS_PROXY_RATE = ALLOWED
    settings.AGENTS_RATE_WINDOW_S = 86_400  # one window for the whole test
    limiter = rate_limiter()
    assert isinstance(limiter, RedisRateLimiter)  # shared by the site's processes
    # Counts of an earlier run (agents' ids start again with a new test database).
    for key in limiter.redis.scan_iter(f"{KEY_PREFIX}*"):
        limiter.redis.delete(key)


def client(agent, kind: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind=kind)}"})


def test_an_agent_hammering_the_api_and_the_proxy_gets_429_and_the_others_do_not(tmp_path, limits):
    ann, _ = provisioned("rate_ann", tmp_path)
    ben, _ = provisioned("rate_ben", tmp_path)

    for kind, route in (("api", "/api/v1/checkpoints"), ("proxy", "/proxy/v1/models")):
        hammer = client(ann, kind)
        statuses = [hammer.get(route).status_code for _ in range(ALLOWED + 3)]
        assert statuses == [200] * ALLOWED + [429] * 3, (kind, statuses)
        refused = hammer.get(route)
        assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
        assert "too many requests" in refused.json()["error"]["message"]
        # A new token is the same agent.
        assert client(ann, kind).get(route).status_code == 429

        assert client(ben, kind).get(route).status_code == 200, kind

    assert client(ann, "api").get("/api/v1/checkpoints").json()["error"]["code"] == "limit"
    assert client(ann, "proxy").get("/proxy/v1/models").json()["error"]["type"] == (
        "rate_limit_error"
    )


def test_the_jobs_routes_ask_the_scheduler_about_the_agents_own_account_once_an_interval(
    tmp_path, settings, monkeypatch
):
    settings.VAR_DIR = tmp_path / "var"
    settings.CLUSTER_BACKEND = "local"
    settings.AGENTS_JOBS_SYNC_INTERVAL_S = 3_600
    asked: list[list[str]] = []
    accounting = LocalBackend.accounting

    def counted(self, *, accounts, since):
        asked.append(list(accounts))
        return accounting(self, accounts=accounts, since=since)

    monkeypatch.setattr(LocalBackend, "accounting", counted)
    ann, ann_account = provisioned("sync_ann", tmp_path)
    ben, ben_account = provisioned("sync_ben", tmp_path)

    ann_api = client(ann, "api")
    for _ in range(5):
        assert ann_api.get("/api/v1/jobs").status_code == 200
    assert asked == [[ann_account.name]]

    assert client(ben, "api").get("/api/v1/jobs").status_code == 200
    assert asked == [[ann_account.name], [ben_account.name]]


def test_requests_with_no_valid_token_share_one_allowance_and_the_agents_keep_theirs(
    tmp_path, limits, settings
):
    """Review of issue 25: a request whose token was missing, unknown or revoked went on to the
    view unlimited (each one token lookups on a worker the voters share). Now they are counted
    together per client address, apart from the agents' own allowances."""
    settings.AGENTS_TOKENLESS_RATE = ALLOWED
    ann, _ = provisioned("rate_bad", tmp_path)
    revoked = token_issue(agent=ann, kind="api")
    token_issue(agent=ann, kind="api")  # revokes the first
    forged = (
        Client(),  # no token
        Client(headers={"Authorization": "Bearer arena_api_" + "A" * 43}),  # unknown
        Client(headers={"Authorization": f"Bearer {revoked}"}),  # revoked
    )

    statuses = [forged[n % 3].get("/api/v1/checkpoints").status_code for n in range(ALLOWED + 3)]
    assert statuses == [401] * ALLOWED + [429] * 3
    proxy = forged[1].get("/proxy/v1/models")  # the same allowance, on the proxy too
    assert proxy.status_code == 429 and int(proxy["Retry-After"]) >= 1

    assert client(ann, "api").get("/api/v1/checkpoints").status_code == 200
    assert client(ann, "proxy").get("/proxy/v1/models").status_code == 200


def test_the_platforms_tokens_of_an_agent_spend_allowances_apart_from_the_agents_own(
    tmp_path, limits
):
    """The judge of an agent's evaluation and its scaffold call the proxy with tokens the
    platform holds, billed to the agent: their calls must not use up the agent's own proxy
    allowance, nor the agent's calls theirs."""
    ann, _ = provisioned("rate_held", tmp_path)
    _, judge = judge_token_issue(agent=ann)
    judged = Client(headers={"Authorization": f"Bearer {judge}"})
    scaffold = Client(headers={"Authorization": f"Bearer {scaffold_token_issue(agent=ann)}"})

    statuses = [judged.get("/proxy/v1/models").status_code for _ in range(ALLOWED + 1)]
    assert statuses == [200] * ALLOWED + [429]

    own = client(ann, "proxy")
    assert [own.get("/proxy/v1/models").status_code for _ in range(ALLOWED)] == [200] * ALLOWED
    assert scaffold.get("/proxy/v1/models").status_code == 200
    assert own.get("/proxy/v1/models").status_code == 429
