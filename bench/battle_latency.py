"""Time to first token and to the full answer in a battle, on the tiny models served locally.

Runs battles the way the arena does — both sides streamed concurrently through the same
OpenAI-compatible client from separate `transformers serve` processes — and prints the
median and p90 per model. Run: `.venv/bin/python bench/battle_latency.py [--battles N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena.serving.backends import LocalServingBackend  # noqa: E402
from arena.serving.client import Endpoint, StreamEnd, stream_chat  # noqa: E402
from infra.tiny_models import build_tiny_models  # noqa: E402

PROMPTS = [
    "What is 3 plus 4?",
    "Name three animals.",
    "Tell me about the sun.",
    "List three fruits.",
]


async def one_side(endpoint: Endpoint, prompt: str, max_tokens: int) -> StreamEnd:
    end = None
    async for event in stream_chat(
        endpoint,
        [{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0.7,
        timeout_s=120,
    ):
        if isinstance(event, StreamEnd):
            end = event
    assert end is not None and not end.error, end
    return end


async def run(
    endpoints: dict[str, Endpoint], battles: int, max_tokens: int
) -> dict[str, list[StreamEnd]]:
    results: dict[str, list[StreamEnd]] = {name: [] for name in endpoints}
    pairs = itertools.cycle(itertools.combinations(endpoints, 2))
    for index in range(battles):
        a, b = next(pairs)
        prompt = PROMPTS[index % len(PROMPTS)]
        ends = await asyncio.gather(
            one_side(endpoints[a], prompt, max_tokens), one_side(endpoints[b], prompt, max_tokens)
        )
        results[a].append(ends[0])
        results[b].append(ends[1])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--battles", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=160, help="as ARENA_MAX_TOKENS")
    parser.add_argument("--models", type=Path, default=ROOT / "var" / "models")
    args = parser.parse_args()

    started = time.monotonic()
    build_tiny_models(args.models, log=lambda line: print(f"  {line}"))
    print(f"tiny models ready in {time.monotonic() - started:.1f} s")
    backend = LocalServingBackend(host="127.0.0.1", base_port=18300, log_dir=ROOT / "var" / "logs")
    names = ["base", "instruct", "markdown"]
    started = time.monotonic()
    endpoints = dict(zip(names, backend.start([args.models / n for n in names]), strict=True))
    print(f"3 model servers ready in {time.monotonic() - started:.1f} s")
    try:
        asyncio.run(run(endpoints, 3, args.max_tokens))  # warm-up
        results = asyncio.run(run(endpoints, args.battles, args.max_tokens))
    finally:
        backend.stop()
    print(
        f"\n{args.battles} battles, both sides streamed concurrently, max_tokens={args.max_tokens}"
    )
    print(
        f"{'model':<10} {'n':>3} {'first token p50/p90 ms':>24} {'full answer p50/p90 ms':>24} {'stop %':>7}"
    )
    for name, ends in results.items():
        first = [e.first_token_s * 1000 for e in ends if e.first_token_s is not None]
        total = [e.total_s * 1000 for e in ends]
        stops = sum(e.finish_reason == "stop" for e in ends) / len(ends) * 100
        print(
            f"{name:<10} {len(ends):>3} {_p(first, 50):>11.0f} /{_p(first, 90):>10.0f} "
            f"{_p(total, 50):>12.0f} /{_p(total, 90):>10.0f} {stops:>6.0f}%"
        )


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=10)[q // 10 - 1] if q != 50 else statistics.median(values)


if __name__ == "__main__":
    main()
