"""How often each agent may call the agent API and the proxy, and how often a jobs route may ask
the scheduler's accounting.

An agent is a program: it can call the API in a loop, and every request takes a web worker the
voters share. Each agent has its own allowance per window for each (`AGENTS_API_RATE`,
`AGENTS_PROXY_RATE` requests per `AGENTS_RATE_WINDOW_S`); past it, the request is answered 429
with `Retry-After` before any view, token check of the view's or trajectory record runs, and
other agents are unaffected. The tokens the platform holds for an agent (its evaluations'
judge, its scaffold) have allowances of their own, one per kind, so the platform's calls and the
agent's never use up each other's. A request with no valid token (missing, unknown, revoked)
is counted too, before any view, in one allowance per client address (`AGENTS_TOKENLESS_RATE`):
agents reach the gateway from the platform's own hosts, so in practice all of them share it,
and a flood of forged tokens is refused without touching the agents' allowances. The counts live in Redis, which every web worker process shares
(`RedisRateLimiter`); without `REDIS_URL` (a single process: development) in the process
(`LocalRateLimiter`).

`interval_claim` is the other half: a jobs route refreshes an account's jobs from `sacct` at
most once per `AGENTS_JOBS_SYNC_INTERVAL_S`, whoever asks and however often.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Protocol

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from agents.gateway import AGENT_PATHS
from agents.models import AgentToken
from agents.services import token_digest

log = logging.getLogger(__name__)

KEY_PREFIX = "arena:agents:rate:"


class RateLimiter(Protocol):
    def take(self, key: str, *, limit: int, window_s: int) -> float | None:
        """Count one request under `key`; None while at most `limit` were counted in this
        window, else the seconds until the window ends."""

    def claim(self, key: str, *, seconds: float) -> bool:
        """True for the first caller in `seconds` under `key`, False for the others."""


class RedisRateLimiter:
    """Fixed windows in Redis: one counter per key and window, expiring with it. Redis out of
    reach limits nothing (logged): the API must not fail with it."""

    def __init__(self, url: str) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def take(self, key: str, *, limit: int, window_s: int) -> float | None:
        now = time.time()
        window = int(now // window_s)
        counter = f"{KEY_PREFIX}{key}:{window_s}:{window}"
        try:
            with self.redis.pipeline() as pipe:
                pipe.incr(counter)
                pipe.expire(counter, window_s + 1)
                count, _ = pipe.execute()
        except redis.RedisError as failed:
            log.warning("rate limit of %s not counted: %s", key, failed)
            return None
        if int(count) <= limit:
            return None
        return (window + 1) * window_s - now

    def claim(self, key: str, *, seconds: float) -> bool:
        milliseconds = max(1, math.ceil(seconds * 1000))
        try:
            return bool(self.redis.set(f"{KEY_PREFIX}{key}", b"1", nx=True, px=milliseconds))
        except redis.RedisError as failed:
            log.warning("interval of %s not claimed: %s", key, failed)
            return True


class LocalRateLimiter:
    """The same in this process's memory (one process; entries of past windows dropped)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, tuple[int, int]] = {}
        self.claims: dict[str, float] = {}

    def take(self, key: str, *, limit: int, window_s: int) -> float | None:
        now = time.time()
        window = int(now // window_s)
        with self.lock:
            seen, count = self.counts.get(key, (window, 0))
            count = count + 1 if seen == window else 1
            self.counts[key] = (window, count)
        if count <= limit:
            return None
        return (window + 1) * window_s - now

    def claim(self, key: str, *, seconds: float) -> bool:
        now = time.monotonic()
        with self.lock:
            if self.claims.get(key, 0.0) > now:
                return False
            self.claims[key] = now + seconds
        return True


@cache
def _limiter_for(url: str) -> RateLimiter:
    return RedisRateLimiter(url) if url else LocalRateLimiter()


def rate_limiter() -> RateLimiter:
    return _limiter_for(settings.AGENTS_RATE_LIMIT_REDIS_URL)


def interval_claim(key: str, *, seconds: float) -> bool:
    """True at most once per `seconds` for `key`, across all the site's processes."""
    return rate_limiter().claim(f"interval:{key}", seconds=seconds)


# Tokens the platform holds for an agent, each kind counted apart from the agent's own calls.
PLATFORM_HELD = {AgentToken.Kind.JUDGE, AgentToken.Kind.SCAFFOLD}


def _bucket_of(request: HttpRequest, scope: str) -> str | None:
    """The allowance the request's token counts against, or None for no valid token."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None  # refused by the view's own token check
    digest = token_digest(header.removeprefix("Bearer ").strip())
    found = (
        AgentToken.objects.filter(digest=digest, revoked_at=None)
        .values_list("agent_id", "kind")
        .first()
    )
    if found is None:
        return None
    agent_id, kind = found
    return f"{scope}:{agent_id}" + (f":{kind}" if kind in PLATFORM_HELD else "")


def _too_many(scope: str, retry_after: float, *, tokenless: bool = False) -> HttpResponse:
    seconds = max(1, math.ceil(retry_after))
    if tokenless:
        allowed = f"at most {settings.AGENTS_TOKENLESS_RATE} requests without a valid token"
    else:
        allowed = f"each agent may make {_limit(scope)} {scope} requests"
    message = (
        f"too many requests: {allowed} every {settings.AGENTS_RATE_WINDOW_S} s;"
        f" try again in {seconds} s"
    )
    if scope == "proxy":  # the OpenAI clients read this shape (and honour Retry-After)
        body = {"error": {"message": message, "type": "rate_limit_error", "code": "rate_limited"}}
    else:
        body = {"error": {"message": message, "code": "limit"}}
    response = JsonResponse(body, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _limit(scope: str) -> int:
    return settings.AGENTS_PROXY_RATE if scope == "proxy" else settings.AGENTS_API_RATE


def agent_rate_limit(get_response: Callable[[HttpRequest], HttpResponse]):
    """Django middleware: each agent's requests to the agent API and the proxy are counted,
    and those past its allowance answered 429 with Retry-After; so are the requests with no
    valid token, per client address."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(AGENT_PATHS):
            return get_response(request)
        scope = "proxy" if request.path.startswith("/proxy/") else "api"
        bucket = _bucket_of(request, scope)
        window_s = settings.AGENTS_RATE_WINDOW_S
        if bucket is None:  # the socket's peer (daphne's), never a header the client wrote
            address = request.META.get("REMOTE_ADDR") or "unknown"
            retry_after = rate_limiter().take(
                f"tokenless:{address}", limit=settings.AGENTS_TOKENLESS_RATE, window_s=window_s
            )
            if retry_after is not None:
                return _too_many(scope, retry_after, tokenless=True)
            return get_response(request)
        retry_after = rate_limiter().take(bucket, limit=_limit(scope), window_s=window_s)
        if retry_after is not None:
            return _too_many(scope, retry_after)
        return get_response(request)

    return middleware
