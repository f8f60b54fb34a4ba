"""The Slurm serving backend: a contestant's model server as a GPU job on the real local
cluster (`transformers serve` on a fake GPU standing in for vLLM), answering like any endpoint,
and gone when the backend stops."""

from __future__ import annotations

import asyncio
import shlex

import pytest

from arena.serving.client import StreamEnd, stream_chat
from arena.serving.local import ServerStartError, transformers_cli
from arena.serving.slurm import SERVING_ACCOUNT, SlurmServingBackend
from cluster.models import Job
from tests.cluster.conftest import wait_for_state

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TEST_COMMAND = (
    "env OMP_NUM_THREADS=1 "
    + " ".join(shlex.quote(part) for part in transformers_cli())
    + ' serve --host 0.0.0.0 --port "$PORT" --device cpu "$CHECKPOINT"'
)


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


def test_a_contestant_is_served_by_a_gpu_job_and_stopped_with_it(tiny_models, slurm, tmp_path):
    tmp_path.chmod(0o755)
    backend = SlurmServingBackend(
        command=TEST_COMMAND, folder=tmp_path, cluster=slurm, ready_timeout_s=180
    )
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
