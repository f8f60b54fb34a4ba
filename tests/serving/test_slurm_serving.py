"""The Slurm serving backend: a contestant's model server as a GPU job on the real local
cluster (`transformers serve` on a fake GPU standing in for vLLM), answering like any endpoint,
and gone when the backend stops."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from arena.serving.client import StreamEnd, stream_chat
from arena.serving.local import REPO_ROOT, ServerStartError, guarded_serve_command
from arena.serving.slurm import SERVING_ACCOUNT, SlurmServingBackend
from cluster.models import Job
from tests.cluster.conftest import wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TEST_COMMAND = (
    f"env OMP_NUM_THREADS=1 PYTHONPATH={shlex.quote(str(REPO_ROOT))} "
    + " ".join(shlex.quote(part) for part in guarded_serve_command())
    + ' --served-model-name "$SERVED_MODEL_NAME" --host 0.0.0.0 --port "$PORT" --device cpu'
    + ' "$CHECKPOINT"'
)

SERVER_MEMORY_MB = 1500  # a tiny model's server; the cluster confines jobs to what they ask


@pytest.fixture
def serving_folder() -> Iterator[Path]:
    """The backend's folder, in the platform's var/ as in production: a job's /tmp is its own
    (job_container/tmpfs), so a folder under pytest's /tmp would not be the job's."""
    folder = Path(settings.VAR_DIR) / "test-serving" / uuid.uuid4().hex[:8]
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def answer(endpoint) -> tuple[str, StreamEnd]:
    parts, end = [], None
    async for event in stream_chat(
        endpoint,
        [{"role": "user", "content": "What is 2 plus 3?"}],
        max_tokens=12,
        temperature=0.0,
        timeout_s=60,
    ):
        if isinstance(event, StreamEnd):
            end = event
        else:
            parts.append(event.text)
    return "".join(parts), end


def test_a_contestant_is_served_by_a_gpu_job_and_stopped_with_it(
    tiny_models, slurm, serving_folder
):
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=serving_folder, cluster=slurm, ready_timeout_s=180,
        memory_mb=SERVER_MEMORY_MB,
    )  # fmt: skip
    try:
        (endpoint,) = backend.start([tiny_models / "instruct"])
        (job,) = Job.objects.filter(account__name=SERVING_ACCOUNT)
        wait_for_state(job, {"RUNNING"}, backend=slurm)
        assert job.gpus == 1
        text, end = asyncio.run(answer(endpoint))
        assert end.finish_reason in {"stop", "length"}, end.error
        assert text.strip()
    finally:
        backend.stop()
    wait_for_state(job, {"CANCELLED"}, backend=slurm)


def test_a_folder_that_is_not_a_checkpoint_is_refused_before_any_job(slurm, tmp_path):
    backend = SlurmServingBackend(command=TEST_COMMAND, folder=tmp_path, cluster=slurm)
    with pytest.raises(ServerStartError, match="is not a model checkpoint"):
        backend.start([tmp_path])
    assert not Job.objects.exists()
