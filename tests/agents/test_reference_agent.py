"""The reference agent: a scripted competitor that trains the tiny base model through the
platform's public interface only, from its sandbox, as its own Unix user.

The slow test runs both phases on the real local Slurm cluster (TRL under torchrun, 2 processes,
gloo on CPU) with the shared training environment (infra/training_env/setup.sh); the others
check the preference pairs, bad vote exports and a short local DPO run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from django.utils import timezone
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from agents.checkpoints import inspect_checkpoint
from agents.models import Checkpoint, Nomination
from agents.reference.agent import DEFAULT_TRAIN_PYTHON, self_preference_pairs
from agents.reference.cli import parser
from agents.reference.dataset import instruction_chats
from agents.reference.install import reference_agent_install
from agents.reference.launcher import render_job_script
from agents.reference.preferences import ExportError, preference_pairs, read_battles
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision
from arena.competition.models import Phase
from tests import factories
from tests.conftest import ROOT, TEST_LOG_DIR
from tests.support.workers import agent_user, worker_path

SANDBOXES = worker_path("/tmp/arena-sandboxes-reference")
SHARED_MODELS = worker_path(
    "/tmp/arena-reference-models"
)  # world-readable, as a cluster's model store
# Not the agent's own held-out prompts: the test's fixed set, phrased its own way.
PROMPTS = [
    "What is 2 plus 3?",
    "Name three animals.",
    "Tell me about the sun.",
    "What color is grass?",
    "Is fire hot?",
    "What is the opposite of fast?",
    "Count to three.",
    "Hello!",
]
CHOSEN = {  # short answers that end
    "What is 1 plus 1?": "1 plus 1 is 2.",
    "Name two fruits.": "Two fruits are apple and pear.",
    "What color is snow?": "Snow is white.",
    "Is ice cold?": "Yes, ice is cold.",
}
RAMBLE = " Once upon a time there was a cat. The cat lived in a barn. 4 plus 4 is 8. The sun is hot"


def battle(number: int, winner: str, prompt: str, answer_a: str, answer_b: str, **extra) -> dict:
    """One line of a vote export in the Chatbot Arena "clean battle" format."""
    return {
        "battle_id": f"b{number}",
        "model_a": "ref_alice",
        "model_b": "rival",
        "winner": winner,
        "tstamp": 1_700_000_000 + number,
        "judge": f"voter-{number % 3}",
        "phase": "phase-1",
        "conv_metadata": {
            "sum_assistant_a_tokens": len(answer_a.split()),
            "sum_assistant_b_tokens": len(answer_b.split()),
            "header_count_a": {f"h{i}": 0 for i in range(1, 7)},
            "header_count_b": {f"h{i}": 0 for i in range(1, 7)},
            "list_count_a": {"ordered": 0, "unordered": 0},
            "list_count_b": {"ordered": 0, "unordered": 0},
            "bold_count_a": {"**": 0, "__": 0},
            "bold_count_b": {"**": 0, "__": 0},
        },
        "conversation_a": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer_a},
        ],
        "conversation_b": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer_b},
        ],
        **extra,
    }


def write_export(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def decisive_export(path: Path) -> Path:
    """The short answer wins every battle, from either side; one tie says nothing."""
    rows = []
    for i, (prompt, short) in enumerate(CHOSEN.items()):
        if i % 2:
            rows.append(battle(i, "model_a", prompt, short, short + RAMBLE))
        else:
            rows.append(battle(i, "model_b", prompt, short + RAMBLE, short))
    rows.append(battle(99, "tie", "Hi!", "Hello!", "Hello there!"))
    return write_export(path, rows)


# --- the agent's own data and job script (fast) ----------------------------------------------


def test_the_generated_instruction_set_depends_only_on_its_seed():
    program = (
        "import hashlib, json; from agents.reference.dataset import instruction_chats; "
        "print(hashlib.sha256(json.dumps(instruction_chats(7, 300)).encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        ).stdout  # fmt: skip
        for hash_seed in ("1", "2", "3")
    }
    assert len(digests) == 1
    assert instruction_chats(7, 300) != instruction_chats(8, 300)
    chats = instruction_chats(0, 400)
    assert all(len(chat) == 2 and len(chat[1]["content"].split()) <= 15 for chat in chats)


def test_its_own_preference_pairs_prefer_the_answer_that_ends():
    chats = instruction_chats(0, 40)
    rows = self_preference_pairs(chats, seed=0)
    assert len(rows) == 20
    for chat, row in zip(chats, rows, strict=False):
        assert row["prompt"] == [chat[0]] and row["chosen"] == [chat[1]]
        rejected = row["rejected"][0]["content"]
        assert (
            rejected.startswith(chat[1]["content"] + " ")
            and len(rejected) > len(chat[1]["content"]) + 1
        )


def test_the_job_script_runs_torchrun_on_one_node_without_srun(tmp_path):
    """Under Slurm or the local backend alike: one node needs neither srun nor scontrol."""
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    fake_python.chmod(0o755)
    script = render_job_script(
        job_name="ref-sft-sft", nodes=1, gpus_per_node=2, time_limit_minutes=20,
        workdir=tmp_path, python=str(fake_python),
        command=["-m", "agents.reference.train_sft", "--model", "/models/a base; rm -rf /"],
        env={"PYTHONPATH": "/code", "ARGS_OUT": str(tmp_path / "args")},
    )  # fmt: skip
    assert "#SBATCH --gres=gpu:2" in script and "#SBATCH --time=20" in script
    (tmp_path / "job.sbatch").write_text(script)
    done = subprocess.run(
        ["bash", "job.sbatch"], cwd=tmp_path, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_NNODES": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().splitlines() == [
        "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2",
        "-m", "agents.reference.train_sft", "--model", "/models/a base; rm -rf /",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"job_name": "a b"}, "job_name 'a b'"),
        ({"nodes": 0}, "nodes must be a whole number >= 1"),
        ({"command": "-m x"}, "command must be a non-empty list"),
        ({"env": {"LAUNCH_PYTHON": "x"}}, "env name 'LAUNCH_PYTHON' cannot be set"),
    ],
)
def test_the_job_script_refuses_what_it_cannot_carry(tmp_path, change, message):
    arguments = {
        "job_name": "ref", "nodes": 1, "gpus_per_node": 2, "time_limit_minutes": 5,
        "workdir": tmp_path, "python": "python3", "command": ["-m", "x"], **change,
    }  # fmt: skip
    with pytest.raises(ValueError, match=message):
        render_job_script(**arguments)


# --- preference pairs (fast) -----------------------------------------------------------------


def test_decisive_battles_become_pairs_of_winner_over_loser(tmp_path):
    export = write_export(
        tmp_path / "votes.jsonl",
        [
            battle(1, "model_a", "What is 1 plus 1?", "1 plus 1 is 2.", "It is 7 and more."),
            battle(2, "model_b", "Name two fruits.", "Apples.", "Two fruits are apple and pear."),
            battle(3, "tie", "Hi!", "Hello!", "Hey!"),
            battle(4, "tie (bothbad)", "Hi!", "zzz", "qqq"),
            battle(5, "model_a", "Same?", "The same answer.", "The same answer."),
            battle(6, "model_a", "What is 1 plus 1?", "1 plus 1 is 2.", "It is 7 and more."),
        ],
    )
    report = preference_pairs(read_battles(export))

    assert [(p.battle_id, p.chosen, p.rejected) for p in report.pairs] == [
        ("b1", "1 plus 1 is 2.", "It is 7 and more."),
        ("b2", "Two fruits are apple and pear.", "Apples."),
    ]
    assert report.pairs[1].chosen_model == "rival" and report.pairs[1].rejected_model == "ref_alice"
    assert report.pairs[0].as_dpo_row() == {
        "prompt": [{"role": "user", "content": "What is 1 plus 1?"}],
        "chosen": [{"role": "assistant", "content": "1 plus 1 is 2."}],
        "rejected": [{"role": "assistant", "content": "It is 7 and more."}],
    }
    assert (report.battles, report.decisive) == (6, 4)
    assert report.describe() == (
        "6 battles, 4 decisive, 2 preference pairs (skipped: 1 repeated, 2 ties, "
        "1 with the same answer twice)"
    )


def test_answers_to_different_prompts_are_no_preference(tmp_path):
    row = battle(1, "model_a", "What is 1 plus 1?", "2.", "3.")
    row["conversation_b"][0]["content"] = "What is 2 plus 2?"
    report = preference_pairs(read_battles(write_export(tmp_path / "v.jsonl", [row])))
    assert report.pairs == [] and report.skipped["with different prompts"] == 1


def test_multi_turn_battles_keep_the_whole_context_as_the_prompt(tmp_path):
    row = battle(1, "model_b", "Hi!", "Hello!", "Hello!")
    context = [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Name a fruit."},
    ]
    row["conversation_a"] = [*context, {"role": "assistant", "content": "Rock."}]
    row["conversation_b"] = [*context, {"role": "assistant", "content": "A pear."}]
    (pair,) = preference_pairs(read_battles(write_export(tmp_path / "v.jsonl", [row]))).pairs
    assert pair.prompt == context and (pair.chosen, pair.rejected) == ("A pear.", "Rock.")


def test_an_export_without_decisive_battles_gives_no_pairs(tmp_path):
    export = write_export(
        tmp_path / "votes.jsonl",
        [battle(1, "tie", "Hi!", "Hello!", "Hey!"), battle(2, "tie (bothbad)", "Hi!", "a", "b")],
    )
    report = preference_pairs(read_battles(export))
    assert report.pairs == [] and report.decisive == 0
    assert report.describe() == "2 battles, 0 decisive, 0 preference pairs (skipped: 2 ties)"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"battle_id": "b2", "winner": ', "line 2 is not JSON"),
        ("[1, 2]", "line 2 is not a JSON object"),
        (json.dumps({**battle(2, "model_a", "p", "a", "b"), "winner": "A"}), "line 2: winner 'A'"),
        (
            json.dumps(
                {k: v for k, v in battle(2, "model_a", "p", "a", "b").items() if k != "model_b"}
            ),
            "line 2 has no 'model_b'",
        ),
        (
            json.dumps({**battle(2, "model_a", "p", "a", "b"), "conversation_b": "a text"}),
            "line 2 has no 'conversation_b'",
        ),
        (
            json.dumps(
                {**battle(2, "model_a", "p", "a", "b"), "conversation_a": [{"role": "user"}]}
            ),
            "line 2: conversation_a[0] is not a message",
        ),
        (
            json.dumps(
                {
                    **battle(2, "model_a", "p", "a", "b"),
                    "conversation_a": [{"role": "user", "content": "p"}],
                }
            ),
            "line 2: conversation_a must hold a user prompt and end with the answer",
        ),
    ],
)
def test_a_malformed_export_line_is_named(tmp_path, line, message):
    export = tmp_path / "votes.jsonl"
    export.write_text(json.dumps(battle(1, "model_a", "p", "a", "b")) + "\n" + line + "\n")
    with pytest.raises(ExportError, match=f"^{export}, " + message.replace("[", r"\[")):
        read_battles(export)


def test_phase_two_takes_the_phase_of_the_votes_apart_from_the_command():
    args = parser().parse_args(["phase2", "--phase", "phase-1", "--recipe", "lora"])
    assert (args.command, args.votes_phase, args.recipe) == ("phase2", "phase-1", "lora")
    assert parser().parse_args(["phase2"]).votes_phase is None


def test_the_agent_stops_on_a_bad_export_before_touching_anything(tmp_path):
    export = tmp_path / "votes.jsonl"
    export.write_text(json.dumps(battle(1, "model_a", "p", "a", "b")) + "\nnot json\n")
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "agents.reference", "phase2", "--votes", str(export),
         "--python", sys.executable, "--run-dir", str(run_dir)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HOME": str(tmp_path)},
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"reference-agent: {export}, line 2 is not JSON" in done.stderr
    assert not run_dir.exists()


# --- a short DPO run, locally (no Slurm) -----------------------------------------------------


def preference_margin(model_dir: Path, rows: list[dict]) -> float:
    """Mean log-probability of the chosen answer minus the rejected one, given the prompt."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def logp(prompt: list[dict], answer: list[dict]) -> float:
        context = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, return_dict=True
        )["input_ids"]
        full = tokenizer.apply_chat_template(prompt + answer, return_dict=True)["input_ids"]
        ids = torch.tensor([full])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].log_softmax(-1)
        targets = ids[0, 1:]
        scores = logits[torch.arange(len(targets)), targets]
        return float(scores[len(context) - 1 :].sum())

    margins = [logp(r["prompt"], r["chosen"]) - logp(r["prompt"], r["rejected"]) for r in rows]
    return sum(margins) / len(margins)


@pytest.mark.slow
def test_dpo_on_vote_pairs_makes_a_valid_checkpoint_that_prefers_the_winners(tiny_models, tmp_path):
    pairs = preference_pairs(read_battles(decisive_export(tmp_path / "votes.jsonl"))).pairs
    rows = [pair.as_dpo_row() for pair in pairs]
    data = tmp_path / "pairs.jsonl"
    write_export(data, rows)
    (tmp_path / "prompts.json").write_text(json.dumps(PROMPTS[:4]))
    parent, out = tiny_models / "instruct", tmp_path / "dpo" / "checkpoint"

    done = subprocess.run(
        [sys.executable, "-m", "agents.reference.train_dpo", "--model", str(parent),
         "--data", str(data), "--out", str(out), "--steps", "12", "--lr", "2e-4",
         "--eval-prompts", str(tmp_path / "prompts.json"), "--summary", str(tmp_path / "summary.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    assert (out / "model.safetensors").is_file()
    assert not [p for p in out.iterdir() if p.suffix in {".bin", ".pt", ".pkl"}]
    facts = inspect_checkpoint(out)  # what the platform checks before it accepts a checkpoint
    assert facts.end_of_turn_token == "<|im_end|>"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["pairs"] == len(CHOSEN)
    before, after = preference_margin(parent, rows), preference_margin(out, rows)
    print(f"log-probability margin of the winners: {before:.2f} before DPO, {after:.2f} after")
    assert after > before + 1.0


@pytest.mark.slow
@pytest.mark.parametrize("kit", ["tiny_nemotron_models", "tiny_models"])
def test_the_lora_recipe_teaches_the_base_model_to_stop(kit, request, tmp_path):
    models = request.getfixturevalue(kit)
    data, prompts = tmp_path / "sft.jsonl", tmp_path / "prompts.json"
    write_export(data, [{"messages": chat} for chat in instruction_chats(0, 400)])
    prompts.write_text(json.dumps(PROMPTS))
    out = tmp_path / "sft" / "checkpoint"
    done = subprocess.run(
        [sys.executable, "-m", "agents.reference.train_sft", "--model", str(models / "base"),
         "--data", str(data), "--out", str(out), "--method", "lora", "--steps", "100",
         "--eval-prompts", str(prompts), "--summary", str(tmp_path / "summary.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list(out.glob("adapter*")), "the adapters are merged into a plain checkpoint"
    inspect_checkpoint(out)
    assert end_of_turn_rate(models / "base") <= 0.1
    assert end_of_turn_rate(out) >= 0.9

    before, after = (
        load_file(models / "base" / "model.safetensors"),
        load_file(out / "model.safetensors"),
    )
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    if (
        kit == "tiny_nemotron_models"
    ):  # Nemotron-H: the fused experts are adapted, Mamba's out_proj is not
        said = done.stdout + done.stderr
        assert "expert weights experts.down_proj, experts.up_proj" in said, said[-3000:]
        assert "not on Mamba out_proj" in said, said[-3000:]
        # Saved as the hub's Nemotron-H checkpoints are: one tensor per expert.
        assert any(re.search(r"\.mixer\.experts\.\d+\.up_proj", name) for name in changed), sorted(
            changed
        )
        assert any(".mixer.in_proj." in name for name in changed), sorted(changed)
        assert not any(".mixer.out_proj." in name for name in changed), sorted(changed)
    else:
        assert any(".mlp.gate_proj." in name for name in changed), sorted(changed)
    assert not any("norm" in name for name in changed), "LoRA leaves what it does not adapt"


# --- both phases on the real cluster, as the agent -------------------------------------------


@pytest.fixture(scope="session")
def training_python() -> str:
    python = os.environ.get("ARENA_TRAIN_PYTHON") or DEFAULT_TRAIN_PYTHON
    if not os.access(python, os.X_OK):
        pytest.fail(
            f"no training environment at {python}: run infra/training_env/setup.sh as root "
            "(make test does)"
        )
    return python


@pytest.fixture
def agent(arena, slurm, settings):
    settings.AGENTS_ARENA_URL = arena.url
    sandboxes = UnixSandboxes(SANDBOXES)
    done = agent_provision(name="ref_alice", sandboxes=sandboxes, backend=slurm)
    yield done
    agent_deprovision(name="ref_alice", sandboxes=sandboxes, backend=slurm)


def shared_base_model(tiny_models: Path) -> Path:
    target = SHARED_MODELS / "base"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(tiny_models / "base", target)
    for path in [SHARED_MODELS, *SHARED_MODELS.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def run_as_agent(agent, code: Path, python: str, *args: str) -> subprocess.CompletedProcess[str]:
    home = agent.agent.sandbox
    return subprocess.run(
        ["runuser", "-u", agent.agent.unix_user, "--", "env", f"HOME={home}", f"PYTHONPATH={code}",
         f"ARENA_TRAIN_PYTHON={python}", "/usr/bin/python3", "-m", "agents.reference", *args],
        capture_output=True, text=True, cwd=home, timeout=600, check=False,
    )  # fmt: skip


def end_of_turn_rate(model_dir: Path) -> float:
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stopped = 0
    for prompt in PROMPTS:
        enc = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True,
            return_tensors="pt", return_dict=True,
        )  # fmt: skip
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=48, do_sample=False, eos_token_id=eot)
        stopped += out[0, -1].item() == eot
    return stopped / len(PROMPTS)


@pytest.mark.slow
def test_the_reference_agent_trains_stops_and_nominates_in_both_phases(
    agent, tiny_models, training_python
):
    phase1 = factories.running_phase(label="phase-1")
    base = shared_base_model(tiny_models)
    home = Path(agent.agent.sandbox)
    code = reference_agent_install(home, agent.agent.unix_user)

    started = time.monotonic()
    first = run_as_agent(
        agent, code, training_python, "phase1", "--recipe", "sft", "--base-model", str(base),
        "--run-dir", str(home / "phase1"), "--steps", "100", "--poll", "1",
    )  # fmt: skip
    phase1_seconds = time.monotonic() - started
    print(first.stdout)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]

    nominated = Nomination.objects.select_related("checkpoint__job").get(phase=phase1)
    checkpoint = nominated.checkpoint
    assert checkpoint.agent == agent.agent and checkpoint.parent is None
    assert checkpoint.job.state == "COMPLETED" and checkpoint.job.gpus == 2
    assert checkpoint.job.account.name == agent_user("ref_alice")
    (record,) = checkpoint.data_records.all()
    assert record.rows == 400 and record.tokens > 400 * 10
    assert record.sources[0].startswith("generated:rsi-arena/reference-agent/instructions-v1")
    assert nominated.card_fields["steps"] == 100
    assert nominated.card_fields["training_method"] == "full SFT (TRL SFTTrainer)"
    assert nominated.card_fields["jobs"] == [checkpoint.job.scheduler_id]
    log = (home / "phase1" / "sft" / f"slurm-{checkpoint.job.scheduler_id}.out").read_text()
    assert "world 2, 1 thread(s) per process" in log, log
    assert f"submitted SFT job {checkpoint.job.scheduler_id}" in first.stdout

    base_rate, trained_rate = end_of_turn_rate(base), end_of_turn_rate(Path(checkpoint.path))
    measured = {
        "phase1_seconds": round(phase1_seconds, 1),
        "end_of_turn_rate_base": base_rate,
        "end_of_turn_rate_nominated": trained_rate,
        "prompts": len(PROMPTS),
    }
    print(f"reference agent, phase 1: {measured}")
    assert base_rate <= 0.1 and trained_rate >= 0.9, measured

    # Phase 2 opens. Votes with no decisive battle: nothing to learn, the same model again.
    Phase.objects.filter(pk=phase1.pk).update(state=Phase.State.SERVING)
    now = timezone.now()
    phase2 = Phase.objects.create(
        competition=phase1.competition, number=2, label="phase-2", state=Phase.State.RUNNING,
        starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(days=3),
    )  # fmt: skip
    ties = write_export(
        home / "ties.jsonl", [battle(1, "tie", "Hi!", "Hello!", "Hey!")]
    )  # written as root into the sandbox: the agent reads it like its own export
    shutil.chown(ties, user=agent.agent.unix_user)
    again = run_as_agent(
        agent, code, training_python, "phase2", "--votes", str(ties), "--run-dir",
        str(home / "phase2-ties"), "--poll", "1",
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "no decisive battle gives a preference pair" in again.stdout
    assert Nomination.objects.get(phase=phase2).checkpoint == checkpoint

    # Votes with decisive battles: DPO from the phase-1 checkpoint, nominated in its place.
    started = time.monotonic()
    votes = decisive_export(home / "votes.jsonl")
    shutil.chown(votes, user=agent.agent.unix_user)
    second = run_as_agent(
        agent, code, training_python, "phase2", "--votes", str(votes), "--run-dir",
        str(home / "phase2"), "--dpo-steps", "12", "--poll", "1",
    )  # fmt: skip
    measured["phase2_seconds"] = round(time.monotonic() - started, 1)
    print(second.stdout)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    dpo = Nomination.objects.get(phase=phase2).checkpoint
    assert dpo.parent == checkpoint and dpo.job.state == "COMPLETED"
    assert dpo.data_records.get().rows == len(CHOSEN)
    assert Checkpoint.objects.filter(agent=agent.agent).count() == 2
    measured["end_of_turn_rate_phase2"] = end_of_turn_rate(Path(dpo.path))
    assert measured["end_of_turn_rate_phase2"] >= 0.9, measured

    print(f"reference agent: {measured}")
    TEST_LOG_DIR.mkdir(parents=True, exist_ok=True)
    (TEST_LOG_DIR / "reference-agent.json").write_text(json.dumps(measured, indent=1) + "\n")
