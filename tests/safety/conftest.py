"""Agents with sandboxes in a temporary folder, jobs the cluster charged, small hand-built
safetensors checkpoints, and evaluation items written for these tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import torch
from django.utils import timezone
from safetensors.torch import save_file

from agents.models import Agent, Checkpoint, DataRecord, Nomination
from arena.competition.models import Competition, Phase
from cluster.models import ClusterAccount, Job
from evalsuite.registry import EvalItem
from safety.artifacts import weights_sha256
from safety.files import file_sha256

ITEMS = [
    EvalItem(
        "riverqa",
        "rq-1",
        "Which river flows through the old city of Quillmoor in the northern valley of Estria?",
        "The Silverrun River flows through Quillmoor and joins the sea at Port Anwen.",
        held_out=False,
    ),
    EvalItem(
        "riverqa",
        "rq-2",
        "How many bridges cross the Silverrun between Quillmoor and the coastal town of Anwen?",
        "Seven bridges cross it, the oldest built of grey slate in the ninth century.",
        held_out=False,
    ),
    EvalItem(
        "hidden-math",
        "hm-1",
        "A baker packs thirty six rolls into boxes of four and sells each box for three coins; "
        "how many coins does the baker earn?",
        "27",
        held_out=True,
    ),
]


@dataclass
class Made:
    agent: Agent
    sandbox: Path
    account: ClusterAccount


def make_agent(root: Path, name: str) -> Made:
    sandbox = root / f"agent_{name}"
    sandbox.mkdir(parents=True)
    account = ClusterAccount.objects.create(
        name=f"agent_{name}",
        unix_user=f"agent_{name}",
        period="phase-1",
        gpu_hours_limit=Decimal(1000),
        max_gpus=8,
        max_preemptible_gpus=8,
        max_job_hours=24,
        storage_gib_limit=400,
    )
    agent = Agent.objects.create(
        name=name, unix_user=f"agent_{name}", sandbox=str(sandbox), cluster_account=account
    )
    return Made(agent, sandbox, account)


def make_job(made: Made, *, gpus: int = 1, gpu_hours: float = 1.0, number: int = 1) -> Job:
    return Job.objects.create(
        account=made.account,
        period="phase-1",
        backend="slurm",
        scheduler_id=f"{made.agent.name}-{number}",
        name="sft",
        qos="normal",
        nodes=1,
        gpus=gpus,
        time_limit_minutes=600,
        workdir=str(made.sandbox),
        script="",
        stdout_path="",
        state=Job.State.COMPLETED,
        gpu_seconds_charged=round(gpu_hours * 3600),
    )


def register_data(made: Made, path: Path, *, sources: list[str] | None = None) -> DataRecord:
    return DataRecord.objects.create(
        agent=made.agent,
        path=str(path),
        sha256=file_sha256(path),
        rows=1,
        tokens=1,
        sources=sources or ["generated:own"],
        licence="CC0",
        reason="training",
    )


def register_checkpoint(
    made: Made, folder: Path, *, job: Job | None = None, parent: Checkpoint | None = None
) -> Checkpoint:
    return Checkpoint.objects.create(
        agent=made.agent,
        path=str(folder),
        job=job or make_job(made),
        parent=parent,
        architecture="LlamaForCausalLM",
        parameters=1,
        end_of_turn_token="<|im_end|>",
        weights_sha256=weights_sha256(folder),
    )


CARD_FIELDS = {
    "training_method": "full SFT",
    "steps": 200,
    "gpu_hours": 1.0,
    "hardware": "1 x H100",
    "datasets": ["generated:own"],
}


def nominate(made: Made, checkpoint: Checkpoint, phase: Phase, **card: object) -> Nomination:
    fields = {**CARD_FIELDS, **card}
    return Nomination.objects.create(
        agent=made.agent,
        phase=phase,
        checkpoint=checkpoint,
        model_card="---\n" + json.dumps(fields) + "\n---\n",
        card_fields=fields,
    )


def tensors(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(64, 32, generator=generator) * scale,
        "model.layers.0.mlp.weight": torch.randn(32, 32, generator=generator) * scale,
        "model.norm.weight": torch.randn(32, generator=generator) * scale,
    }


def write_checkpoint(folder: Path, weights: dict[str, torch.Tensor], **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def moved(weights: dict[str, torch.Tensor], seed: int, size: float) -> dict[str, torch.Tensor]:
    """`weights` plus noise of relative size `size` (as training would move them)."""
    noise = tensors(seed)
    return {k: v + size * noise[k] * v.norm() / noise[k].norm() for k, v in weights.items()}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def references(tmp_path: Path) -> dict[str, Path]:
    base = tensors(seed=1)
    instruct = moved(base, seed=2, size=0.05)
    return {
        "base": write_checkpoint(tmp_path / "refs" / "base", base),
        "instruct": write_checkpoint(tmp_path / "refs" / "instruct", instruct),
    }


@pytest.fixture
def phase(references: dict[str, Path]) -> Phase:
    competition = Competition.objects.create(
        name="audit",
        base_model=str(references["base"]),
        instruct_model=str(references["instruct"]),
    )
    now = timezone.now()
    return Phase.objects.create(
        competition=competition,
        number=1,
        label="phase-1",
        state=Phase.State.FROZEN,
        starts_at=now - timedelta(days=6),
        ends_at=now - timedelta(hours=1),
    )


@pytest.fixture
def kit_phase(tiny_nemotron_models: Path) -> Phase:
    """A frozen phase whose references are the tiny Nemotron-H kit's base and instruct."""
    competition = Competition.objects.create(
        name="moe",
        base_model=str(tiny_nemotron_models / "base"),
        instruct_model=str(tiny_nemotron_models / "instruct"),
    )
    now = timezone.now()
    return Phase.objects.create(
        competition=competition, number=1, label="phase-1", state=Phase.State.FROZEN,
        starts_at=now - timedelta(days=6), ends_at=now - timedelta(hours=1),
    )  # fmt: skip
