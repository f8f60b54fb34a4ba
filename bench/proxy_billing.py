"""What the metered proxy charges an agent against what the upstream bills, case by case, in
every protocol it speaks: Chat Completions, Responses, embeddings and Anthropic Messages.

Runs the site as production does (daphne, on the PostgreSQL database of `DATABASE_URL`,
migrated first), in front of `tests.support.billing_llm.BillingLLM`, a fake upstream that
bills like a real one (prompt tokens over the whole request body, completion summed over the
`n` choices, billed on receipt even when the caller hangs up). Each case has an agent of its
own; the bench waits until its calls are settled, then prints, per case, what the agent was
charged, what the upstream billed and what the calls reserved. The target: billed <= charged
<= reserved in every case; refused requests are neither billed nor charged. Its agents (`b…`)
and upstreams (`billing`, `billing-slow`) stay in that database: use one of its own.

Run: `DATABASE_URL=postgres://…/arena_bench .venv/bin/python bench/proxy_billing.py`
(`--protocols chat` runs the chat cases alone, which an older checkout of the site also
serves, to measure the proxy before a change: they need only `ProxyCall` and
`agents.services.cost_usd`). Responses and Messages have no `n`: their equivalents are the
concurrent calls and the output caps.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")

import django  # noqa: E402

django.setup()

import httpx2  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from agents.models import Agent, ProxyCall, Upstream  # noqa: E402
from agents.services import agent_create, cost_usd, token_issue  # noqa: E402
from tests.support.billing_llm import BillingLLM  # noqa: E402

PROMPT_PRICE, COMPLETION_PRICE = Decimal("2.50"), Decimal("10")  # USD per million tokens
# The other rates, as a provider lists them: cache reads a tenth, 5-minute cache writes a
# quarter above the prompt price, embeddings far below it.
PRICES = {
    "usd_per_million_cached_prompt_tokens": Decimal("0.25"),
    "usd_per_million_cache_write_tokens": Decimal("3.125"),
    "usd_per_million_embedding_tokens": Decimal("0.02"),
}
PATHS = {
    "chat": "chat/completions",
    "responses": "responses",
    "embeddings": "embeddings",
    "messages": "messages",
}
MESSAGES = [{"role": "user", "content": "Say something."}]
PROPERTIES = {f"field_{i}": {"type": "string", "description": "x " * 40} for i in range(900)}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": PROPERTIES}}}]  # fmt: skip
SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": PROPERTIES}}}  # fmt: skip
BIG = [{"role": "user", "content": "lorem ipsum, " * 8000}]  # ~100 KB


@dataclass
class Site:
    url: str
    fake: BillingLLM
    upstreams: dict[str, Upstream]

    def post(
        self, token: str, body: dict[str, Any], timeout: float = 60, protocol: str = "chat"
    ) -> int:
        try:
            return httpx2.post(
                f"{self.url}/proxy/v1/{PATHS[protocol]}",
                json=body,
                headers=_auth(token, protocol),
                timeout=timeout,
            ).status_code
        except httpx2.TimeoutException:
            return 0  # the agent hung up

    def stream_first_chunk(self, token: str, body: dict[str, Any], protocol: str = "chat") -> int:
        with httpx2.stream(
            "POST",
            f"{self.url}/proxy/v1/{PATHS[protocol]}",
            json={**body, "stream": True},
            headers=_auth(token, protocol),
            timeout=60,
        ) as reply:
            next(reply.iter_lines())
            return reply.status_code  # closed after the first line


def _auth(token: str, protocol: str) -> dict[str, str]:
    if protocol == "messages":  # as the anthropic SDK sends it
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {token}"}


def _bill_usd(upstream: Upstream, bill: Any) -> Decimal:
    """What the fake upstream billed, at the upstream's rates for each kind of token (read with
    defaults, so the chat cases run on a checkout without the other rates)."""

    def rate(name: str) -> Decimal:
        value = getattr(upstream, name, None)
        return upstream.usd_per_million_prompt_tokens if value is None else value

    if getattr(bill, "embedding", False):
        cost = bill.prompt_tokens * rate("usd_per_million_embedding_tokens") / 1_000_000
        return cost.quantize(Decimal("0.000001"), rounding="ROUND_UP") * bill.price_factor
    cached = getattr(bill, "cached_prompt_tokens", 0)
    written = getattr(bill, "cache_write_tokens", 0)
    plain = bill.prompt_tokens - cached - written
    if not cached and not written:
        return (
            cost_usd(
                upstream, prompt_tokens=bill.prompt_tokens, completion_tokens=bill.completion_tokens
            )
            * bill.price_factor
        )
    cost = (
        plain * upstream.usd_per_million_prompt_tokens
        + cached * rate("usd_per_million_cached_prompt_tokens")
        + written * rate("usd_per_million_cache_write_tokens")
        + bill.completion_tokens * upstream.usd_per_million_completion_tokens
    ) / 1_000_000
    return cost.quantize(Decimal("0.000001"), rounding="ROUND_UP") * bill.price_factor


@dataclass
class Row:
    case: str
    statuses: str
    charged: Decimal
    billed: Decimal
    reserved: Decimal

    @property
    def ok(self) -> bool:
        return self.billed <= self.charged <= self.reserved


def _start_site(fake: BillingLLM) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (ROOT / "var" / "bench-proxy-daphne.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "arena.asgi:application"],
        cwd=ROOT, env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("daphne did not start; see var/bench-proxy-daphne.log") from None
            time.sleep(0.2)


def _settled(agent: Agent, within_s: float = 30) -> Agent:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        agent.refresh_from_db()
        in_flight = ProxyCall.objects.filter(agent=agent, status=0).exists()
        if not in_flight and agent.credit_reserved == 0:
            break
        time.sleep(0.1)
    return agent


def play(site: Site, case: str, model: str, calls: Callable[[str], list[int]], credit: str) -> Row:
    agent = agent_create(name=f"b{secrets.token_hex(6)}", credit_limit=Decimal(credit))
    token = token_issue(agent=agent, kind="proxy")
    site.fake.reset()
    statuses = calls(token)
    agent = _settled(agent)
    upstream = site.upstreams[model]
    billed = sum((_bill_usd(upstream, b) for b in site.fake.billed()), Decimal(0))
    logged = ProxyCall.objects.filter(agent=agent)
    counts = {status: statuses.count(status) for status in sorted(set(statuses))}
    return Row(
        case=case,
        statuses=" ".join(f"{n}x{s or 'hung-up'}" for s, n in counts.items()),
        charged=agent.credit_spent,
        billed=billed,
        reserved=sum((c.reserved_usd for c in logged), Decimal(0)),
    )


Play = tuple[str, str, Callable[[str], list[int]], str]  # case, upstream, calls, credit


def _concurrently(
    site: Site, concurrency: int, bodies: list[dict[str, Any]], protocol: str
) -> Callable[[str], list[int]]:
    """`concurrency` calls at once, cycling through `bodies`; every sixth streams and hangs
    up after its first line."""

    def calls(token: str) -> list[int]:
        start = threading.Barrier(concurrency)

        def call(index: int) -> int:
            start.wait()
            body = bodies[index % len(bodies)]
            if index % 6 == 5 and protocol != "embeddings":
                return site.stream_first_chunk(token, body, protocol)
            return site.post(token, body, protocol=protocol)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(call, range(concurrency)))

    return calls


def cases(site: Site, concurrency: int, protocols: list[str]) -> list[Row]:
    plays: list[Play] = []
    if "chat" in protocols:
        plays += _chat_plays(site, concurrency)
    if "responses" in protocols:
        plays += _responses_plays(site, concurrency)
    if "embeddings" in protocols:
        plays += _embeddings_plays(site, concurrency)
    if "messages" in protocols:
        plays += _messages_plays(site, concurrency)
    return [play(site, case, model, calls, credit) for case, model, calls, credit in plays]


def _responses_plays(site: Site, concurrency: int) -> list[Play]:
    def one(body: dict[str, Any], timeout: float = 60) -> Callable[[str], list[int]]:
        return lambda token: [site.post(token, body, timeout, "responses")]

    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": PROPERTIES}}]  # fmt: skip
    base = {"model": "billing", "input": "Say something."}
    big = {"model": "billing", "input": BIG[0]["content"], "max_output_tokens": 2000}
    thinking = {**base, "reasoning": {"effort": "high"}, "prompt_cache_key": "k"}
    return [
        ("responses: tools adding ~55k prompt tokens", "billing", one({**base, "tools": tools, "max_output_tokens": 50}), "100"),
        ("responses: reasoning + cached input", "billing", one({**thinking, "max_output_tokens": 3000}), "100"),
        ("responses: no max_output_tokens (capped)", "billing", one(base), "100"),
        ("responses: 100 KB input, hung up after 1st event", "billing", lambda t: [site.stream_first_chunk(t, big, "responses")], "100"),
        ("responses: client hangs up at 0.5 s", "billing-slow", one({**base, "model": "billing-slow", "max_output_tokens": 1000}, timeout=0.5), "100"),
        ("responses: previous_response_id (refused)", "billing", one({**base, "previous_response_id": "resp_1"}), "100"),
        (f"responses: {concurrency} concurrent, $1 credit", "billing", _concurrently(site, concurrency, [{**thinking, "max_output_tokens": 500}, {**base, "tools": tools, "max_output_tokens": 50}, {**big, "max_output_tokens": 300}], "responses"), "1"),
    ]  # fmt: skip


def _embeddings_plays(site: Site, concurrency: int) -> list[Play]:
    def one(body: dict[str, Any]) -> Callable[[str], list[int]]:
        return lambda token: [site.post(token, body, protocol="embeddings")]

    texts = [f"document {i}: " + "lorem ipsum " * 40 for i in range(2048)]
    return [
        ("embeddings: one string", "billing", one({"model": "billing", "input": "a sentence"}), "100"),
        ("embeddings: 2,048 long strings", "billing", one({"model": "billing", "input": texts}), "100"),
        ("embeddings: token lists", "billing", one({"model": "billing", "input": [[1, 2, 3]] * 500}), "100"),
        ("embeddings: 2,049 inputs (refused)", "billing", one({"model": "billing", "input": ["x"] * 2049}), "100"),
        (f"embeddings: {concurrency} concurrent, $0.01 credit", "billing", _concurrently(site, concurrency, [{"model": "billing", "input": texts[:300]}], "embeddings"), "0.01"),
    ]  # fmt: skip


def _messages_plays(site: Site, concurrency: int) -> list[Play]:
    def one(body: dict[str, Any], timeout: float = 60) -> Callable[[str], list[int]]:
        return lambda token: [site.post(token, body, timeout, "messages")]

    said = [{"role": "user", "content": "Say something."}]
    tools = [{"name": "f", "input_schema": {"type": "object", "properties": PROPERTIES}}]
    cached = [{"type": "text", "text": "You are terse. " * 2000, "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    base = {"model": "billing", "messages": said, "max_tokens": 1000}
    big = {"model": "billing", "messages": BIG, "max_tokens": 2000}
    return [
        ("messages: tools adding ~55k prompt tokens", "billing", one({**base, "tools": tools}), "100"),
        ("messages: cache writes and reads", "billing", one({**base, "system": cached, "tools": tools[:1]}), "100"),
        ("messages: 100 KB, hung up after 1st event", "billing", lambda t: [site.stream_first_chunk(t, big, "messages")], "100"),
        ("messages: client hangs up at 0.5 s", "billing-slow", one({**base, "model": "billing-slow"}, timeout=0.5), "100"),
        ("messages: no max_tokens (refused)", "billing", one({"model": "billing", "messages": said}), "100"),
        ("messages: hour-long cache write (refused)", "billing", one({**base, "system": [{**cached[0], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}), "100"),
        (f"messages: {concurrency} concurrent, $1 credit", "billing", _concurrently(site, concurrency, [{**base, "system": cached}, {**base, "tools": tools}, big], "messages"), "1"),
    ]  # fmt: skip


def _chat_plays(site: Site, concurrency: int) -> list[Play]:
    def one(body: dict[str, Any], timeout: float = 60) -> Callable[[str], list[int]]:
        return lambda token: [site.post(token, body, timeout)]

    def concurrent(token: str) -> list[int]:
        bodies = [
            {"model": "billing", "messages": MESSAGES, "n": 4, "max_tokens": 500},
            {"model": "billing", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 50},
            {"model": "billing", "messages": BIG, "max_tokens": 300, "stream": True},
        ]
        start = threading.Barrier(concurrency)

        def call(index: int) -> int:
            start.wait()
            body = bodies[index % len(bodies)]
            if index % 6 == 5:  # every sixth hangs up after the first chunk
                return site.stream_first_chunk(token, body)
            return site.post(token, body)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(call, range(concurrency)))

    def hang_up_after_first_chunk(token: str) -> list[int]:
        body = {"model": "billing", "messages": BIG, "max_tokens": 2000}
        return [site.stream_first_chunk(token, body)]

    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}]
    base = {"model": "billing", "messages": MESSAGES}
    slow = {"model": "billing-slow", "messages": MESSAGES, "max_tokens": 1000}
    plays: list[Play] = [
        ("n=8, max_tokens=3000", "billing", one({**base, "n": 8, "max_tokens": 3000}), "100"),
        ("tools adding ~55k prompt tokens", "billing", one({**base, "tools": TOOLS}), "100"),
        ("response_format, ~55k-token schema", "billing", one({**base, "response_format": SCHEMA}), "100"),
        ("no max_tokens (the proxy caps it: 4096)", "billing", one(base), "100"),
        ("100 KB prompt, stream closed after 1st chunk", "billing", hang_up_after_first_chunk, "100"),
        ("non-streamed, client hangs up at 0.5 s", "billing-slow", one(slow, timeout=0.5), "100"),
        ("stream without stream_options", "billing", one({**base, "stream": True}), "100"),
        ("image part (refused)", "billing", one({"model": "billing", "messages": image}), "100"),
        ("service_tier=priority (refused)", "billing", one({**base, "service_tier": "priority"}), "100"),
        (f"{concurrency} concurrent mixed calls, $1 credit", "billing", concurrent, "1"),
    ]  # fmt: skip
    return plays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=30)
    parser.add_argument(
        "--protocols",
        default=",".join(PATHS),
        help=f"the protocols to play, comma-separated (default: {','.join(PATHS)})",
    )
    args = parser.parse_args()
    protocols = [name.strip() for name in args.protocols.split(",") if name.strip()]
    if set(protocols) - set(PATHS):
        sys.exit(f"--protocols: choose from {', '.join(PATHS)}")
    others = protocols != ["chat"]  # the other protocols' columns: this checkout's own
    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        sys.exit("set DATABASE_URL to a PostgreSQL database (concurrent settlement needs it)")
    call_command("migrate", verbosity=0)
    fake = BillingLLM()
    fake.start()
    upstreams = {
        model: Upstream.objects.update_or_create(
            name=model,
            defaults={
                "base_url": fake.base_url,
                "upstream_model": model,
                "usd_per_million_prompt_tokens": PROMPT_PRICE,
                "usd_per_million_completion_tokens": COMPLETION_PRICE,
                "max_completion_tokens": 4096,
                "active": True,
                **({"protocols": list(PATHS), **PRICES} if others else {}),
            },
        )[0]
        for model in ("billing", "billing-slow")
    }
    process, url = _start_site(fake)
    try:
        site = Site(url=url, fake=fake, upstreams=upstreams)
        rows = []
        for row in cases(site, args.concurrency, protocols):
            rows.append(row)
            print(_line(row), flush=True)
    finally:
        process.terminate()
        process.wait(timeout=10)
        fake.stop()
        Upstream.objects.filter(pk__in=[u.pk for u in upstreams.values()]).update(active=False)
    bad = [row.case for row in rows if not row.ok]
    print(f"\ncharged >= billed and <= reserved in {len(rows) - len(bad)} of {len(rows)} cases")
    if bad:
        sys.exit(f"FAILED: {', '.join(bad)}")


def _line(row: Row) -> str:
    verdict = "ok" if row.ok else "UNDER-CHARGED" if row.charged < row.billed else "OVER"
    return (
        f"{row.case:<52} {row.statuses:<22} charged ${row.charged:>9.6f}  "
        f"billed ${row.billed:>9.6f}  reserved ${row.reserved:>9.6f}  {verdict}"
    )


if __name__ == "__main__":
    main()
