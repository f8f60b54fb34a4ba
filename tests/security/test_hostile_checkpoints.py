"""Issue 12, item 6: a checkpoint's settings are the agent's text. Validation answers within
seconds and bounded memory whatever the config claims, and every malformed file gets the
API's documented JSON error (a 4xx), never a 500."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest
from django.test import Client

from agents.models import Checkpoint
from agents.services import RegistrationRefused, checkpoint_register
from tests.security.conftest import Player, bounded
from tests.security.test_sandbox_links import job_writing_to

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def checkpoint_of(player: Player, source: Path, name: str = "ckpt") -> Path:
    """A copy of `source` in the agent's sandbox, the agent's own files, as its job writes them."""
    target = player.home / name
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        shutil.chown(path, user=player.user, group=player.user)
    return target


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("kit", "changes", "message"),
    [
        ("tiny_models", {"num_hidden_layers": 1_000_000}, "num_hidden_layers must be a whole number"),
        ("tiny_models", {"num_hidden_layers": 1000}, "describes 1000 layers; the weights hold 4"),
        ("tiny_models", {"text_config": {"num_hidden_layers": 10**6, "hidden_size": 128}}, "num_hidden_layers"),
        ("tiny_models", {"vocab_size": 8_000_000, "hidden_size": 1 << 20}, "parameters"),
        # The competition's base is a mixture of experts (Nemotron-H): its experts are claims too.
        ("tiny_nemotron_models", {"n_routed_experts": 4096, "moe_intermediate_size": 1 << 22}, "parameters, more than"),
        ("tiny_nemotron_models", {"n_routed_experts": 64}, "describes 64 routed experts per MoE layer; the weights hold 4"),
        ("tiny_nemotron_models", {"num_experts_per_tok": 100}, "num_experts_per_tok 100 is more than the 4"),
        ("tiny_nemotron_models", {"layers_block_type": ["moe"] * 1000}, "describes 1000 layers; the weights hold 4"),
        ("tiny_nemotron_models", {"layers_block_type": ["moe"] * 100_000}, "layers_block_type must be a list of 1 to 1024"),
    ],
    ids=[
        "a million layers",
        "a thousand layers over four",
        "nested",
        "a huge embedding",
        "huge experts",
        "experts the weights lack",
        "more per token than experts",
        "a thousand blocks over four",
        "a hundred thousand blocks",
    ],
)  # fmt: skip
def test_a_config_describing_a_huge_model_is_refused_in_seconds(
    players, request, kit, changes, message
):
    tiny_models = request.getfixturevalue(kit)
    ann = players("sec_hostile_a")
    folder = checkpoint_of(ann, tiny_models / "instruct")
    edit_config(folder, **changes)
    job = job_writing_to(ann, ann.home, 21)

    started = time.monotonic()
    with bounded(seconds=15, memory_mib=512), pytest.raises(RegistrationRefused, match=message):
        checkpoint_register(
            agent=ann.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
        )
    assert time.monotonic() - started < 10
    assert not Checkpoint.objects.exists()


def test_a_model_larger_than_the_maximum_is_refused_before_anything_is_built(
    players, tiny_models, settings
):
    ann = players("sec_hostile_b")
    checkpoint_of(ann, tiny_models / "instruct")
    job = job_writing_to(ann, ann.home, 22)
    settings.AGENTS_CHECKPOINT_MAX_PARAMETERS = 1000  # the tiny model has ~600k

    with (
        bounded(seconds=15, memory_mib=512),
        pytest.raises(RegistrationRefused, match="parameters"),
    ):
        checkpoint_register(
            agent=ann.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
        )


def _safetensors_header(header: object, *, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _break(folder: Path, how: str) -> None:
    weights = folder / "model.safetensors"
    if how == "config not JSON":
        (folder / "config.json").write_text('{"model_type": "llama", ')
    elif how == "config a list":
        (folder / "config.json").write_text("[1, 2, 3]")
    elif how == "config unknown model type":
        edit_config(folder, model_type="no-such-model", architectures=["NoSuchForCausalLM"])
    elif how == "config sizes as text":
        edit_config(folder, hidden_size="huge", num_attention_heads=None)
    elif how == "config negative sizes":
        edit_config(folder, hidden_size=-128, intermediate_size=0)
    elif how == "config heads do not divide":
        edit_config(folder, num_attention_heads=3, head_dim=None)
    elif how == "config of 200 MB":
        (folder / "config.json").write_text('{"pad": "' + "x" * (200 * 1024**2) + '"}')
    elif how == "safetensors garbage":
        weights.write_bytes(b"\xff" * 64)
    elif how == "safetensors short":
        weights.write_bytes(b"\x01\x02")
    elif how == "safetensors header a list":
        weights.write_bytes(_safetensors_header([1, 2]))
    elif how == "safetensors offsets past the end":
        header = json.loads(
            weights.read_bytes()[8 : 8 + struct.unpack("<Q", weights.read_bytes()[:8])[0]]
        )
        for name, tensor in header.items():
            if name != "__metadata__":
                tensor["data_offsets"] = [0, 10**12]
        weights.write_bytes(_safetensors_header(header))
    elif how == "safetensors shape not numbers":
        weights.write_bytes(
            _safetensors_header({"x": {"dtype": "F32", "shape": ["a"], "data_offsets": [0, 4]}})
        )
    elif how == "generation_config not JSON":
        (folder / "generation_config.json").write_text("{eos_token_id: 2")
    elif how == "generation_config a string":
        (folder / "generation_config.json").write_text('"eos"')
    elif how == "generation_config eos out of range":
        (folder / "generation_config.json").write_text('{"eos_token_id": 100000000000000000000}')
    elif how == "generation_config eos negative":
        (folder / "generation_config.json").write_text('{"eos_token_id": [-7]}')
    else:
        raise AssertionError(how)


MALFORMED = [
    "config not JSON",
    "config a list",
    "config unknown model type",
    "config sizes as text",
    "config negative sizes",
    "config heads do not divide",
    "config of 200 MB",
    "safetensors garbage",
    "safetensors short",
    "safetensors header a list",
    "safetensors offsets past the end",
    "safetensors shape not numbers",
    "generation_config not JSON",
    "generation_config a string",
    "generation_config eos out of range",
    "generation_config eos negative",
]


@pytest.fixture
def registrar(players, tiny_models):
    """One agent with a completed job, and its API."""
    ann = players("sec_hostile_c")
    job = job_writing_to(ann, ann.home, 23)
    api = Client(raise_request_exception=False)
    headers = {"Authorization": f"Bearer {ann.provisioned.api_token}"}

    def register(folder: str):
        return api.post(
            "/api/v1/checkpoints", {"path": folder, "job": job.scheduler_id},
            content_type="application/json", headers=headers,
        )  # fmt: skip

    return ann, register


def test_every_malformed_file_gets_a_json_error_never_a_500(registrar, tiny_models):
    ann, register = registrar
    answers = {}
    for number, how in enumerate(MALFORMED):
        folder = checkpoint_of(ann, tiny_models / "instruct", f"bad-{number}")
        _break(folder, how)
        started = time.monotonic()
        with bounded(seconds=60, memory_mib=2048):
            reply = register(folder.name)
        answers[how] = (reply.status_code, time.monotonic() - started, reply.content)
    for how, (status, seconds, body) in answers.items():
        assert 400 <= status < 500, (how, status, body[:300])
        assert json.loads(body)["error"]["code"] == "refused", (how, body[:300])
        assert seconds < 30, (how, seconds)
    assert not Checkpoint.objects.exists()

    good = checkpoint_of(ann, tiny_models / "instruct", "good")
    accepted = register(good.name)
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["architecture"] == "LlamaForCausalLM"
    assert accepted.json()["parameters"] > 0
