"""GPU check of an evaluation job's serving path (run by infra/gpu/check_evaluation.sh).

Serves a checkpoint the way an agent's on-demand evaluation job does
(`evalsuite.model_server.job_model_server`: vLLM on a GPU node with vLLM, else guarded
`transformers serve` on CUDA), runs proxy benchmarks through the runner against it, and prints
which server ran, how long it took to come up and each score ± standard error.

    python -m infra.gpu.check_evaluation --model var/test-models/instruct --out /tmp/evalcheck \
        [--server auto|vllm|transformers] [--benchmark gsm8k ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from arena.serving.vllm import VllmOptions
from evalsuite.model_server import job_model_server
from evalsuite.runner import run_benchmarks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--server", default="auto")
    p.add_argument("--benchmark", action="append", default=None)
    p.add_argument("--hub-cache", default=str(Path("evalsuite/fixtures/hub_cache").resolve()))
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args(argv)
    names = args.benchmark or ["gsm8k"]
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True, mode=0o700)
    server, choice = job_model_server(
        args.model.resolve(),
        folder=args.out,
        base_port=18600,
        setting=args.server,
        vllm_options=VllmOptions(dtype="bfloat16", max_model_len=2048, gpu_memory_utilization=0.5),
        ready_timeout_s=300,
    )
    print(f"server: {choice.kind} on {choice.device} ({choice.reason})", flush=True)
    started = time.perf_counter()
    try:
        server.start()
        ready_s = time.perf_counter() - started
        print(f"server ready in {ready_s:.1f} s at {server.endpoint.base_url}", flush=True)
        began = time.perf_counter()
        outcomes = run_benchmarks(
            endpoint=server.endpoint,
            benchmark_names=names,
            log_dir=str(args.out / "logs"),
            max_tokens=args.max_tokens,
            hub_cache=args.hub_cache,
        )
        eval_s = time.perf_counter() - began
    finally:
        server.stop()
    for outcome in outcomes:
        print(
            json.dumps(
                {
                    "benchmark": outcome.benchmark,
                    "n": outcome.n,
                    "score": outcome.score,
                    "stderr": outcome.stderr,
                    "error": outcome.error[:300],
                }
            )
        )
    print(f"evaluation: {len(outcomes)} benchmark(s) in {eval_s:.1f} s", flush=True)
    return 0 if all(o.score is not None for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
