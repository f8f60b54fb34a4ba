"""Data and checkpoint registration through the CLI, with every bad input refused cleanly."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest

from agents.models import Checkpoint, DataRecord
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from tests import factories
from tests.agents.test_api_and_cli import cli
from tests.agents.test_nominations import CARD
from tests.support.workers import worker_path

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = worker_path("/tmp/arena-sandboxes-test")


@pytest.fixture
def agents(arena, slurm, settings, tiny_models):
    settings.AGENTS_ARENA_URL = arena.url
    sandboxes = UnixSandboxes(ROOT)
    made = [
        agent_provision(name=name, sandboxes=sandboxes, backend=slurm)
        for name in ("reg_ann", "reg_ben")
    ]
    yield made
    for done in made:
        agent_deprovision(name=done.agent.name, sandboxes=sandboxes, backend=slurm)


def give(agent, source: Path, name: str) -> Path:
    """Copy files into the agent's sandbox, owned by the agent, as its own job would write them."""
    target = Path(agent.agent.sandbox) / name
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copy(source, target)
    for path in [target, *target.rglob("*")]:
        shutil.chown(path, user=agent.agent.unix_user, group=agent.agent.unix_user)
    return target


def give_text(agent, name: str, text: str) -> Path:
    target = Path(agent.agent.sandbox) / name
    target.write_text(text)
    shutil.chown(target, user=agent.agent.unix_user, group=agent.agent.unix_user)
    return target


def run_job(agent, command: str, *, wait_for: str = "COMPLETED") -> str:
    submitted = cli(agent, "submit", "--wrap", command, "--time", "2", "--gpus", "1", "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    deadline = time.monotonic() + 90
    while json.loads(cli(agent, "job", job_id, "--json").stdout)["state"] != wait_for:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    return job_id


def test_data_and_a_checkpoint_are_registered_with_their_lineage(agents, tiny_models):
    ann, _ = agents
    data = give(ann, tiny_models / "tokenizer" / "tokenizer.json", "sft.jsonl")
    recorded = cli(ann, "data", "register", "sft.jsonl", "--rows", "400", "--tokens", "12000",
                   "--source", "generated:tiny-chats", "--licence", "CC0", "--reason", "teach the stop token", "--json")  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    record = json.loads(recorded.stdout)
    assert record["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()

    job_id = run_job(ann, "echo training done")
    give(ann, tiny_models / "instruct", "ckpt-1")
    first = cli(
        ann,
        "checkpoints",
        "register",
        "ckpt-1",
        "--job",
        job_id,
        "--data",
        str(record["id"]),
        "--json",
    )
    assert first.returncode == 0, first.stderr
    first_id = json.loads(first.stdout)["id"]
    give(ann, tiny_models / "markdown", "ckpt-2")
    second = json.loads(
        cli(
            ann,
            "checkpoints",
            "register",
            "ckpt-2",
            "--job",
            job_id,
            "--parent",
            str(first_id),
            "--json",
        ).stdout
    )
    assert second["parent"] == first_id
    listed = json.loads(cli(ann, "checkpoints", "list", "--json").stdout)["checkpoints"]
    assert [c["id"] for c in listed] == [first_id, second["id"]]
    assert listed[0]["end_of_turn_token"] == "<|im_end|>" and listed[0]["data_records"] == [
        record["id"]
    ]

    factories.running_phase(name="registration")
    card = give_text(ann, "card.md", CARD)
    nominated = cli(ann, "nominate", str(second["id"]), "--card", card.name)
    assert nominated.returncode == 0, nominated.stderr
    chosen = json.loads(cli(ann, "nominations", "--json").stdout)["nominations"]
    assert [(n["phase"], n["checkpoint"]) for n in chosen] == [("phase-1", second["id"])]


def test_bad_registrations_are_refused_and_leave_nothing(agents, tiny_models):
    ann, ben = agents
    done = run_job(ann, "true")
    bens_job = run_job(ben, "true")
    good = give(ann, tiny_models / "instruct", "good")

    pickled = give(ann, tiny_models / "instruct", "pickled")
    give(ann, tiny_models / "instruct" / "model.safetensors", "pickled/pytorch_model.bin")
    no_template = give(ann, tiny_models / "instruct", "no-template")
    config = json.loads((no_template / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (no_template / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in no_template.glob("chat_template.*"):
        extra.unlink()

    cases = [
        (["checkpoints", "register", str(pickled), "--job", done], "pickle files are not accepted"),
        (["checkpoints", "register", str(no_template), "--job", done], "no chat template"),
        (
            ["checkpoints", "register", str(good), "--job", bens_job],
            f"job {bens_job} is not one of your jobs",
        ),
        (["checkpoints", "register", "../reg_ben", "--job", done], "outside your sandbox"),
        (
            ["checkpoints", "register", str(good), "--job", done, "--data", "999999"],
            "are not yours",
        ),
        (
            [
                "data",
                "register",
                "/etc/passwd",
                "--rows",
                "1",
                "--tokens",
                "1",
                "--source",
                "x",
                "--licence",
                "x",
                "--reason",
                "x",
            ],
            "outside your sandbox",
        ),  # fmt: skip
    ]
    for args, message in cases:
        refused = cli(ann, *args)
        assert refused.returncode == 1, args
        assert message in refused.stderr, (args, refused.stderr)

    running = cli(ann, "submit", "--wrap", "sleep 60", "--time", "2", "--json")
    running_id = json.loads(running.stdout)["id"]
    time.sleep(2)
    still = cli(ann, "checkpoints", "register", str(good), "--job", running_id)
    assert "only a completed job's checkpoint can be registered" in still.stderr
    cli(ann, "cancel", running_id)
    assert Checkpoint.objects.count() == 0 and DataRecord.objects.count() == 0
