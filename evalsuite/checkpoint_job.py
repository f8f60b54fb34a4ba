"""What an agent's on-demand evaluation job runs (on a Slurm node, as the platform's user):
copy the checkpoint out of the sandbox, serve the copy, run the benchmarks against it.

Imported when the job's pickled call is loaded, before Django is set up: nothing here imports
a model at module level (the copy code of the agents app is imported once Django is ready).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from arena.serving.client import Endpoint
from arena.serving.vllm import VllmOptions
from evalsuite.runner import BenchmarkOutcome, run_benchmarks

SERVER_BASE_PORT = 18600  # the job's server binds the first free port from here


@dataclass(frozen=True)
class CheckpointJob:
    """Everything the job needs, as plain values (it touches no database)."""

    sandbox: str
    checkpoint_path: str
    parameters: int
    weights_sha256: str
    folder: str  # the run's platform-owned folder: the copy and inspect's logs go here
    benchmark_names: list[str]
    max_tokens: int
    hub_cache: str
    # Which server (evalsuite/model_server.py): "auto" is vLLM on a GPU node with vLLM.
    server: str = "auto"
    vllm: VllmOptions = field(default_factory=VllmOptions)
    # The judge of judge-graded benchmarks: the API proxy with a token that bills the agent.
    judge: Endpoint | None = None
    # The copy's bound: the bytes counted for it when the run was requested (None: no bound
    # but the checkpoint's own), and what it must leave free on the run's filesystem.
    max_copy_bytes: int | None = None
    keep_free_bytes: int = 1024**3


def evaluate_checkpoint(*, job: CheckpointJob) -> list[BenchmarkOutcome]:
    """The job: copy the checkpoint into the run's folder, serve the copy, run the benchmarks
    against it, stop the server and remove the copy."""
    _django_ready()
    from evalsuite.model_server import job_model_server

    folder = Path(job.folder)
    copy = checkpoint_copy(job, into=folder / "model")
    try:
        server, choice = job_model_server(
            copy,
            folder=folder,
            base_port=SERVER_BASE_PORT,
            setting=job.server,
            vllm_options=job.vllm,
        )
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    print(f"serving with {choice.kind} on {choice.device} ({choice.reason})", flush=True)
    try:
        server.start()
        return run_benchmarks(
            endpoint=server.endpoint,
            benchmark_names=job.benchmark_names,
            log_dir=str(folder / "logs"),
            max_tokens=job.max_tokens,
            hub_cache=job.hub_cache,
            judge=job.judge,
        )
    finally:
        server.stop()
        shutil.rmtree(copy, ignore_errors=True)


def checkpoint_copy(job: CheckpointJob, *, into: Path) -> Path:
    """The checkpoint's weights and settings copied out of the sandbox as the nominee store
    copies them (agents/nominees.py), then checked: valid, and the weights registered."""
    from agents.nominees import checkpoint_files_copy, copy_check
    from cluster.sandbox_files import locate

    source = locate(Path(job.sandbox), job.checkpoint_path)
    shutil.rmtree(into, ignore_errors=True)  # a requeued job starts again
    into.mkdir(mode=0o700, parents=True)
    files = checkpoint_files_copy(
        source,
        into,
        parameters=job.parameters,
        max_bytes=job.max_copy_bytes,
        keep_free_bytes=job.keep_free_bytes,
    )
    copy_check(into, files, registered_sha256=job.weights_sha256)
    return into


def _django_ready() -> None:
    """The job imports the agents app's copy code, which needs Django's app registry (it
    reads no database)."""
    import django
    from django.apps import apps

    if not apps.ready:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
        django.setup()
