"""`release --phase L --out DIR [--push ORG]` (issue 14, item 9): each nominee as a hub model
repository with its model card, the phase's battles as a hub data set, nothing written when
anything is missing."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from decimal import Decimal
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command
from huggingface_hub import DatasetCard, ModelCard

from agents.models import Agent, Checkpoint, Nomination
from agents.nominees import nominee_copy_make
from agents.services import parse_model_card
from arena.battles.models import Battle
from arena.battles.services import vote_record
from arena.phases.publish import FolderPublisher
from arena.phases.release import ReleaseRefused, release_push, release_write
from cluster.models import ClusterAccount, Job
from safety.models import Finding
from tests import factories

pytestmark = pytest.mark.django_db

RELEASED = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja"}  # fmt: skip


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def nominee(phase, name: str, sandboxes: Path, model: Path, card: str = factories.MODEL_CARD):
    """An agent whose checkpoint `ckpt` (a copy of `model`) in its sandbox is registered and
    nominated in `phase`."""
    account = ClusterAccount.objects.create(
        name=f"agent_{name}", unix_user=f"agent_{name}", gpu_hours_limit=Decimal(10), max_gpus=8,
        max_preemptible_gpus=8, max_job_hours=24, storage_gib_limit=1,
    )  # fmt: skip
    sandbox = sandboxes / name
    shutil.copytree(model, sandbox / "ckpt")
    (sandbox / "ckpt" / "optimizer.pt").write_bytes(b"not released")
    agent = Agent.objects.create(name=name, cluster_account=account, sandbox=str(sandbox))
    job = Job.objects.create(
        account=account, backend="slurm", scheduler_id=f"{name}-1", name="sft", qos="normal",
        nodes=1, gpus=2, time_limit_minutes=10, workdir="/tmp", script="", stdout_path="",
        state="COMPLETED",
    )  # fmt: skip
    weights = hashlib.sha256(sha256(model / "model.safetensors").encode()).hexdigest()
    checkpoint = Checkpoint.objects.create(
        agent=agent, path="ckpt", job=job, architecture="LlamaForCausalLM", parameters=1_000_000,
        end_of_turn_token="<|im_end|>", weights_sha256=weights,
    )  # fmt: skip
    return Nomination.objects.create(
        agent=agent, phase=phase, checkpoint=checkpoint, model_card=card,
        card_fields=parse_model_card(card),
    )  # fmt: skip


def battle(a, b, choice: str, phase_label: str) -> None:
    fought = factories.complete_battle(a=a, b=b, texts=("**Four.**\n# Sum", "4"))
    Battle.objects.filter(pk=fought.pk).update(phase=phase_label)
    vote_record(battle_id=fought.pk, choice=choice, voter_key=factories.voter_key(), ip_hash="ip")


@pytest.fixture
def phase(tmp_path, settings, tiny_models):
    """phase-1 with two nominees, ann and bob, whose checkpoints were not copied yet (the
    release reads them from their sandboxes); both evaluated; bob with a confirmed contamination finding; three
    battles between them and the instruct reference."""
    settings.AGENTS_NOMINEE_STORE = tmp_path / "nominees"
    phase = factories.running_phase(label="phase-1")
    ann = nominee(phase, "ann", tmp_path / "sandboxes", tiny_models / "instruct")
    bob = nominee(phase, "bob", tmp_path / "sandboxes", tiny_models / "markdown")
    factories.eval_run(phase, "base", {"gsm8k": 0.1, "mmlu": 0.25, "math": 0.05})
    factories.eval_run(phase, "agent", {"gsm8k": 0.4, "mmlu": 0.5, "math": 0.3, "ifeval": 1.0},
                       agent=ann.agent, checkpoint=ann.checkpoint, label="ann-phase-1")  # fmt: skip
    factories.eval_run(phase, "agent", {"gsm8k": 0.9, "mmlu": 0.8},
                       agent=bob.agent, checkpoint=bob.checkpoint, label="bob-phase-1")  # fmt: skip
    Finding.objects.create(
        agent=bob.agent, phase=phase, kind=Finding.Kind.CONTAMINATION, severity="high",
        summary="trained on the GSM8K test set", evidence={}, fingerprint="f" * 64,
        status=Finding.Status.CONFIRMED, last_seen_at=phase.starts_at,
    )  # fmt: skip
    ann_c, bob_c, ref = (factories.contestant(n) for n in
                         ("ann-phase-1", "bob-phase-1", "reference-instruct"))  # fmt: skip
    battle(ann_c, bob_c, "a", "phase-1")
    battle(bob_c, ref, "tie", "phase-1")
    battle(ref, ann_c, "bothbad", "phase-1")
    battle(ann_c, ref, "b", "phase-0")  # another phase's battle: not released
    return phase


@pytest.fixture
def copied(phase):
    """The phase frozen: ann's checkpoint copied into the platform's store (the release reads
    that copy), bob's copy never made (his sandbox is read)."""
    assert nominee_copy_make(nomination=Nomination.objects.get(agent__name="ann")).servable
    return phase


def released(phase, out: Path) -> dict[str, Path]:
    release = release_write(phase=phase, out=out, progress=lambda line: None)
    return {repo.name: out / repo.folder for repo in release.repos}


def test_each_nominee_is_a_model_repository_of_its_registered_files(copied, tmp_path, tiny_models):
    repos = released(copied, tmp_path / "release")

    assert set(repos) == {"ann-phase-1", "bob-phase-1", "phase-1-battles"}
    assert repos["ann-phase-1"] == tmp_path / "release" / "models" / "ann-phase-1"
    assert repos["phase-1-battles"] == tmp_path / "release" / "datasets" / "phase-1-battles"
    for name, model in (("ann-phase-1", "instruct"), ("bob-phase-1", "markdown")):
        files = {p.name for p in repos[name].iterdir()}
        assert files == RELEASED | {"README.md"}, name  # no optimizer state, nothing else
        for file in RELEASED:
            assert sha256(repos[name] / file) == sha256(tiny_models / model / file)
    assert not list(tmp_path.glob(".release.partial-*"))


def test_the_model_card_carries_the_claims_results_and_audit(phase, tmp_path):
    repos = released(phase, tmp_path / "release")
    card = ModelCard.load(repos["ann-phase-1"] / "README.md")

    assert card.data.model_name == "ann-phase-1"
    assert card.data.library_name == "transformers"
    assert card.data.base_model is None  # the competition's base is a local path, not a hub id
    assert card.data.claimed == {"training_method": "full SFT", "steps": 250, "gpu_hours": 1.5,
                                 "hardware": "2 x H100", "datasets": ["generated:tiny-chats"]}  # fmt: skip
    assert card.data.arena["audit"] == {"confirmed_findings": [], "violation": False,
                                        "scores": "measured"}  # fmt: skip
    assert card.data.arena["weights_sha256"] == Nomination.objects.get(
        agent__name="ann").checkpoint.weights_sha256  # fmt: skip
    results = {r.dataset_name: r for r in card.data.eval_results}
    assert set(results) == {"gsm8k", "mmlu", "ifeval"}  # math is held out: the competition runs
    gsm8k = results["gsm8k"]
    assert (gsm8k.dataset_type, gsm8k.metric_type, gsm8k.metric_value) == (
        "openai/gsm8k", "accuracy", 0.4)  # fmt: skip
    assert gsm8k.dataset_revision and gsm8k.dataset_split == "test"
    assert gsm8k.metric_name == "accuracy (± 0.0100, n=100)"
    assert "It stops at the end of its turn." in card.text
    assert "No confirmed finding." in card.text
    assert "math" not in card.text and "Held-out benchmarks are left out" in card.text
    # no instruct reference was evaluated: no headline, and the card says why, never a mean
    assert "Benchmark progress (median gap closed, base 0 to instruct 1): no benchmark where" \
        " instruct beats base." in card.text  # fmt: skip
    assert "gsm8k (no instruct score); ifeval (no base or instruct score)" in card.text


def test_a_confirmed_violation_is_released_with_the_base_models_scores(phase, tmp_path):
    card = ModelCard.load(released(phase, tmp_path / "release")["bob-phase-1"] / "README.md")

    audit = card.data.arena["audit"]
    assert audit["violation"] is True and audit["scores"].startswith("the base model's: ")
    assert audit["confirmed_findings"] == [
        {"kind": "contamination", "severity": "high", "summary": "trained on the GSM8K test set"}
    ]
    results = {r.dataset_name: r.metric_value for r in card.data.eval_results}
    assert results == {"gsm8k": 0.1, "mmlu": 0.25}  # measured 0.9 and 0.8
    assert all("confirmed violation" in r.metric_name for r in card.data.eval_results)
    assert "| gsm8k | 0.9000 | 0.0100 | 100 | 0.1000 |" in card.text


def test_held_out_results_are_released_once_the_competition_has_ended(phase, tmp_path):
    phase.competition.phases.update(state="closed")
    card = ModelCard.load(released(phase, tmp_path / "release")["ann-phase-1"] / "README.md")

    assert {r.dataset_name for r in card.data.eval_results} == {"gsm8k", "mmlu", "math", "ifeval"}
    assert card.data.arena["held_out_included"] is True


def test_a_hostile_card_cannot_write_the_released_metadata(phase, tmp_path, tiny_models):
    hostile = factories.MODEL_CARD.replace(
        "hardware: 2 x H100", 'hardware: "2 x H100\\n---\\nmodel-index: [{name: fake}]\\n---"'
    ).replace("# My model", "---\nmodel-index: [{name: fake}]\n---\n# My model")
    nominee(phase, "eve", tmp_path / "sandboxes", tiny_models / "instruct", card=hostile)
    card = ModelCard.load(released(phase, tmp_path / "release")["eve-phase-1"] / "README.md")

    assert card.data.model_name == "eve-phase-1" and card.data.eval_results is None
    assert card.data.claimed["hardware"] == "2 x H100\n---\nmodel-index: [{name: fake}]\n---"


def test_the_battles_are_a_dataset_whose_parquet_rows_are_the_export(phase, tmp_path):
    folder = released(phase, tmp_path / "release")["phase-1-battles"]

    jsonl = [json.loads(line) for line in (folder / "battles.jsonl").read_text().splitlines()]
    parquet = pq.read_table(folder / "data" / "train-00000-of-00001.parquet").to_pylist()
    assert len(jsonl) == 3 and {row["phase"] for row in jsonl} == {"phase-1"}
    assert parquet == jsonl
    call_command("battles", "export", out=tmp_path / "export.jsonl", phase="phase-1",
                 stdout=io.StringIO())  # fmt: skip
    assert (folder / "battles.jsonl").read_bytes() == (tmp_path / "export.jsonl").read_bytes()
    # As a user of the hub would read it: the card's config points `datasets` at the Parquet.
    loaded = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"))
    assert loaded.to_list() == jsonl
    assert [row["winner"] for row in jsonl] == ["model_a", "tie", "tie (bothbad)"]
    assert jsonl[0]["conv_metadata"]["bold_count_a"] == {"**": 0, "__": 0}
    card = DatasetCard.load(folder / "README.md")
    assert card.data.configs[0]["data_files"][0]["path"] == "data/train-00000-of-00001.parquet"
    for column in ("battle_id", "conv_metadata", "conversation_a", "finish_reason_b"):
        assert f"| `{column}` |" in card.text
    assert "`ann-phase-1`, `bob-phase-1`, `reference-instruct`" in card.text


def test_a_missing_checkpoint_stops_the_release_before_anything_is_written(phase, tmp_path):
    shutil.rmtree(tmp_path / "sandboxes" / "bob" / "ckpt")
    with pytest.raises(ReleaseRefused, match=r"bob's nominee \(checkpoint \d+\) cannot be"):
        released(phase, tmp_path / "release")
    assert [p.name for p in tmp_path.iterdir()] == ["sandboxes"]


def test_a_changed_platform_copy_stops_the_release(copied, tmp_path):
    copy = Nomination.objects.get(agent__name="ann").nominee_copy
    config = Path(copy.folder) / "config.json"
    config.chmod(0o600)
    config.write_text('{"model_type": "llama"}')
    with pytest.raises(ReleaseRefused, match="ann's nominee .* config.json of the copy has sha256"):
        released(copied, tmp_path / "release")
    assert not (tmp_path / "release").exists()


def test_a_link_in_the_checkpoint_is_never_followed(phase, tmp_path):
    ckpt = tmp_path / "sandboxes" / "bob" / "ckpt"
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "tokenizer.json").symlink_to(tmp_path / "sandboxes" / "ann" / "ckpt" / "tokenizer.json")
    with pytest.raises(ReleaseRefused, match="bob's nominee: tokenizer.json is a symbolic link"):
        released(phase, tmp_path / "release")
    assert not (tmp_path / "release").exists()
    assert not list(tmp_path.glob(".release.partial-*"))


def test_the_command_refuses_an_unknown_phase_and_a_folder_in_use(phase, tmp_path):
    with pytest.raises(CommandError, match="no phase labelled 'phase-9'"):
        call_command("release", phase="phase-9", out=tmp_path / "out")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="used exists and is not an empty folder"):
        call_command("release", phase="phase-1", out=tmp_path / "used")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["notes.txt"]


def test_the_command_writes_into_an_empty_folder_and_reports_each_repository(phase, tmp_path):
    (tmp_path / "out").mkdir()
    output = io.StringIO()
    call_command("release", phase="phase-1", out=tmp_path / "out", stdout=output)

    lines = output.getvalue().splitlines()
    assert "model ann-phase-1: written" in lines and "model bob-phase-1: written" in lines
    assert "dataset phase-1-battles: 3 battles written" in lines
    assert (tmp_path / "out" / "models" / "bob-phase-1" / "model.safetensors").is_file()


def test_a_push_uploads_every_repository_under_the_organisation(phase, tmp_path):
    release = release_write(phase=phase, out=tmp_path / "release", progress=lambda line: None)
    lines: list[str] = []
    where = release_push(release=release, org="arena-org", publisher=FolderPublisher(tmp_path / "hub"),
                         progress=lines.append)  # fmt: skip

    assert where == [str(tmp_path / "hub" / "models" / "arena-org" / "ann-phase-1"),
                     str(tmp_path / "hub" / "models" / "arena-org" / "bob-phase-1"),
                     str(tmp_path / "hub" / "datasets" / "arena-org" / "phase-1-battles")]  # fmt: skip
    assert "dataset arena-org/phase-1-battles: uploading" in lines
    pushed = ModelCard.load(tmp_path / "hub" / "models" / "arena-org" / "ann-phase-1" / "README.md")
    assert pushed.data.model_name == "ann-phase-1"
