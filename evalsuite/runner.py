"""Run a batch of benchmarks against one OpenAI-compatible endpoint with `inspect_ai`.

`run_benchmarks` is what an evaluation job executes (on a Slurm node through submitit, or as a
local process): it needs the endpoint, the judge (the API proxy, for judge-graded benchmarks)
and a log folder, touches no database, and returns plain values that `evaluations_collect`
stores. inspect's own log (JSON, one file per benchmark, every sample with its messages and
scores) is kept in the log folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from arena.serving.client import Endpoint
from evalsuite import hub
from evalsuite.benchmark_metrics import benchmark_metrics
from evalsuite.items import AnsweredItem
from evalsuite.metrics import Score, mean_and_stderr
from evalsuite.registry import MissingDataset, benchmark

DEFAULT_MAX_TOKENS = 512
REQUEST_TIMEOUT_S = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# inspect counts tokens with tiktoken in a few paths (compaction, token limits), and tiktoken
# downloads its encodings on first use. Evaluation nodes are offline: never let it try.
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INSPECT_DISPLAY": "none"}


@dataclass(frozen=True)
class ItemOutcome:
    item_id: str
    value: float  # 1.0 correct, 0.0 not (a judge's partial credit lies between)
    answer: str  # what the model committed to (truncated)
    explanation: str = ""


@dataclass(frozen=True)
class BenchmarkOutcome:
    benchmark: str
    n: int
    score: float | None  # None when the benchmark could not run (see `error`)
    stderr: float | None
    log_path: str
    items: list[ItemOutcome] = field(default_factory=list)
    error: str = ""
    # the benchmark's own aggregates beside its score (BBQ's bias scores), each ± se and n
    metrics: dict[str, Score] = field(default_factory=dict)


def run_benchmarks(
    *,
    endpoint: Endpoint,
    benchmark_names: list[str],
    log_dir: str,
    judge: Endpoint | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_connections: int = 4,
    max_retries: int = 2,
    hub_cache: str = "",
    fortress_judges: list[Endpoint] | None = None,
) -> list[BenchmarkOutcome]:
    """Evaluate the endpoint's model on the named benchmarks; one outcome per benchmark.

    `hub_cache` is the hub cache holding the pinned data sets (what the submitting process
    read, so a node reads the same); a benchmark whose set is missing there is unscored, with
    the message naming the set and the fetch command."""
    for key, value in _OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    if hub_cache:
        os.environ[hub.CACHE_ENV] = hub_cache
    # Imported here so that merely importing the registry or the metrics stays cheap.
    from inspect_ai import eval as inspect_eval
    from inspect_ai._eval.run import ensure_unique_ids
    from inspect_ai.model import GenerateConfig, Model, get_model

    from evalsuite.rubric_judges import JUDGE_MAX_TOKENS
    from evalsuite.tasks import benchmark_task

    config = GenerateConfig(
        max_tokens=max_tokens,
        temperature=0.0,
        max_connections=max_connections,
        max_retries=max_retries,
        timeout=REQUEST_TIMEOUT_S,
    )
    # Streamed, as the arena calls contestants: every server we serve with speaks it.
    model = get_model(
        f"openai-api/contestant/{endpoint.model}",
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or "unused",
        config=config,
        memoize=False,
        stream=True,
    )

    def judge_of(endpoint: Endpoint) -> Model:
        return get_model(
            f"openai-api/judge/{endpoint.model}",
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or "unused",
            config=GenerateConfig(
                # inspect_evals' judge scorers pass no config: room for the reasoning asked
                max_tokens=JUDGE_MAX_TOKENS,
                temperature=0.0,
                max_connections=2,
                max_retries=max_retries,
                timeout=REQUEST_TIMEOUT_S,
            ),
            memoize=False,
            stream=True,
        )

    judge_model = judge_of(judge) if judge is not None else None
    panel = [judge_of(endpoint) for endpoint in fortress_judges or []]
    tasks = []
    outcomes: dict[str, BenchmarkOutcome] = {}
    for name in benchmark_names:
        entry = benchmark(name)
        if entry.scorer == "judge" and judge_model is None:
            outcomes[name] = BenchmarkOutcome(name, 0, None, None, "", error="no judge configured")
            continue
        try:
            task = benchmark_task(entry, judge=judge_model, panel=panel)
            ensure_unique_ids(task.dataset)  # what inspect refuses the whole batch for
        except MissingDataset as missing:
            outcomes[name] = BenchmarkOutcome(name, 0, None, None, "", error=str(missing))
        except Exception as broken:  # its data or its task: this benchmark's failure alone
            outcomes[name] = _failed(name, "could not load", broken)
        else:
            tasks.append(task)
    Path(log_dir).mkdir(parents=True, exist_ok=True)

    def evaluate(batch: list) -> None:  # type: ignore[type-arg]
        for log in inspect_eval(
            batch,
            model=model,
            log_dir=log_dir,
            log_format="json",
            display="none",
            max_tasks=2,
            fail_on_error=False,
            retry_on_error=0,
            log_level="warning",
        ):
            outcomes[log.eval.task] = _outcome(log)

    try:
        if tasks:
            evaluate(tasks)
    except Exception:
        # One task broke the batch before its log was written: run them one at a time, so
        # that the others still score and the broken one says why.
        for task in tasks:
            if task.name in outcomes:
                continue
            try:
                evaluate([task])
            except Exception as crashed:
                outcomes[task.name] = _failed(task.name, "crashed", crashed)
    return [outcomes[name] for name in benchmark_names]


def _failed(name: str, what: str, error: BaseException) -> BenchmarkOutcome:
    reason = _plain(str(error)).strip().splitlines()[0][:1000] if str(error).strip() else ""
    return BenchmarkOutcome(
        name, 0, None, None, "", error=f"{what}: {type(error).__name__}: {reason}".rstrip(": ")
    )


def _outcome(log) -> BenchmarkOutcome:  # type: ignore[no-untyped-def]
    """Scores from inspect's log. An item that errored (the model unreachable, a timeout) makes
    the whole benchmark unscored: a zero for it would read as a wrong answer."""
    name = log.eval.task
    items, failures = [], []
    for sample in log.samples or []:
        score = next(iter((sample.scores or {}).values()), None)
        if sample.error is not None or score is None:
            message = _plain(getattr(sample.error, "message", "") or "no score")
            failures.append(f"{sample.id}: {message.splitlines()[0] if message else ''}")
            items.append(ItemOutcome(str(sample.id), 0.0, "", message[:2000]))
            continue
        items.append(
            ItemOutcome(
                item_id=str(sample.id),
                value=_value(score.value),
                answer=(score.answer or sample.output.completion or "")[:500],
                explanation=(score.explanation or "")[:2000],
            )
        )
    error = (
        ""
        if log.status == "success"
        else f"{log.status}: {_plain(getattr(log.error, 'message', ''))}"
    )
    if failures:
        error = f"{len(failures)} of {len(items)} items failed ({failures[0]}) {error}".strip()
    if not items or failures:
        return BenchmarkOutcome(
            name, len(items), None, None, log.location, items, error or "no samples"
        )
    score, err = mean_and_stderr([item.value for item in items])
    answered = [
        AnsweredItem(
            sample.metadata or {},
            sample.output.completion or "",
            next(iter(sample.scores.values())).metadata or {},
        )
        for sample in log.samples
    ]
    return BenchmarkOutcome(
        name, len(items), score, err, log.location, items, error, benchmark_metrics(name, answered)
    )


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def _value(value: object) -> float:
    if isinstance(value, str):
        return {"C": 1.0, "P": 0.5, "I": 0.0}.get(value, 0.0)
    if isinstance(value, bool | int | float):
        return float(value)
    return 0.0
