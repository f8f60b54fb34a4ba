"""The reference agent's two phases, driven only through the platform's public interface (the
`arena-agent` CLI) from inside its sandbox. Standard library only: the heavy work runs in the
training interpreter, as Slurm jobs (training) or short local steps (token counts).

Phase 1: write its own instruction set, register it, train (full SFT, LoRA, or SFT then DPO on
its own preference pairs) with torchrun through `arena-agent submit`, wait, register the
checkpoint with its job, data and parent, write a model card, nominate.
Phase 2: export its votes, turn decisive battles into preference pairs, train DPO from the
phase-1 checkpoint, register, nominate again — or, with no decisive battle, say so and nominate
the phase-1 checkpoint again.
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.reference import dataset
from agents.reference.client import ArenaAgent
from agents.reference.launcher import render_job_script
from agents.reference.preferences import PairsReport, preference_pairs, read_battles

CODE_ROOT = Path(__file__).resolve().parents[2]  # holds agents/reference: the jobs' PYTHONPATH
DEFAULT_TRAIN_PYTHON = "/opt/rsi-arena/train-env/bin/python"
TERMINAL = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE",
}  # fmt: skip
JOB_LOG_PREFIXES = ("[reference-train", "{'loss'", "job ", "Traceback")
TRAINER_LOG_KEYS = ("loss", "mean_token_accuracy", "rewards/accuracies", "rewards/margins", "epoch")


class AgentFailure(RuntimeError):
    """The agent stopped: a job failed, or its model is not good enough to nominate."""


@dataclass(frozen=True)
class Recipe:
    name: str
    method: str  # "full" or "lora", for every training job of the recipe
    self_dpo: bool  # phase 1 adds a DPO job on the agent's own preference pairs
    description: str


RECIPES = {
    "sft": Recipe("sft", "full", False, "full SFT"),
    "lora": Recipe("lora", "lora", False, "LoRA SFT (r=16, experts too, merged)"),
    "sft-dpo": Recipe("sft-dpo", "full", True, "full SFT, then DPO on its own preference pairs"),
}


@dataclass
class Options:
    recipe: Recipe
    run_dir: Path
    python: str = DEFAULT_TRAIN_PYTHON
    seed: int = 0
    chats: int = 400
    sft_steps: int = 120
    dpo_steps: int = 30
    gpus: int = 2
    nodes: int = 1
    minutes: int = 20
    max_wait_minutes: float = 60
    eval_prompts: int = 16
    min_end_of_turn_rate: float = 0.8
    poll_s: float = 2.0


@dataclass
class Progress:
    """One line per step, with the seconds since the agent started."""

    write: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)

    def say(self, message: str) -> None:
        self.write(f"[reference-agent {time.monotonic() - self.started:6.1f}s] {message}")


@dataclass(frozen=True)
class Trained:
    job: dict[str, Any]  # the job as the platform reports it once completed
    summary: dict[str, Any]  # what the training job wrote (steps, loss, end-of-turn rates)
    checkpoint_dir: Path


# --- phase 1 ---------------------------------------------------------------------------------


def phase1(
    *, platform: ArenaAgent, options: Options, base_model: Path, parent: int | None = None,
    progress: Progress,
) -> dict[str, Any]:  # fmt: skip
    """Train from `base_model` by the recipe and nominate the result; returns what it did."""
    recipe, run = options.recipe, options.run_dir
    _prepare(options, progress, f"phase 1, recipe {recipe.name} ({recipe.description})")
    chats = dataset.instruction_chats(options.seed, options.chats)
    sft_data = run / "data" / "sft.jsonl"
    dataset.write_jsonl(sft_data, [{"messages": chat} for chat in chats])
    progress.say(f"wrote {len(chats)} generated instruction chats to {sft_data}")
    sft_record = _register_data(
        platform, options, progress, sft_data, model=base_model,
        sources=[f"{dataset.SOURCE}?seed={options.seed}&n={options.chats}"],
        licence=dataset.LICENCE,
        reason="teach the base model the chat turn format and to end its turn with <|im_end|>",
    )  # fmt: skip
    prompts = dataset.held_out_prompts(options.seed, options.eval_prompts, exclude=chats)
    sft = _train(
        platform, options, progress, kind="sft", model=base_model, data=sft_data,
        prompts=prompts, steps=options.sft_steps,
    )  # fmt: skip
    _check_stops(options, sft.summary, "SFT")
    checkpoint = _register_checkpoint(
        platform, progress, sft, data=[sft_record["id"]], parent=parent
    )
    stages = [(sft, sft_record, checkpoint)]
    if recipe.self_dpo:
        pairs_file = run / "data" / "self-preferences.jsonl"
        dataset.write_jsonl(pairs_file, self_preference_pairs(chats, options.seed))
        pairs_record = _register_data(
            platform, options, progress, pairs_file, model=sft.checkpoint_dir,
            sources=[f"{dataset.SOURCE}/self-preferences?seed={options.seed}"],
            licence=dataset.LICENCE,
            reason="prefer the answer that ends over the same answer running on into another",
        )  # fmt: skip
        dpo = _train(
            platform, options, progress, kind="dpo", model=sft.checkpoint_dir, data=pairs_file,
            prompts=prompts, steps=options.dpo_steps,
        )  # fmt: skip
        _check_stops(options, dpo.summary, "DPO")
        checkpoint = _register_checkpoint(
            platform, progress, dpo, data=[pairs_record["id"]], parent=checkpoint["id"]
        )
        stages.append((dpo, pairs_record, checkpoint))
    card = model_card(
        title=f"reference agent, recipe {recipe.name}, phase 1",
        base_model=str(base_model),
        stages=stages,
        parent=parent,
        before=sft.summary.get("end_of_turn_rate_before"),
    )
    return _nominate_and_finish(platform, options, progress, checkpoint, card, stages)


def self_preference_pairs(chats: list[dataset.Chat], seed: int) -> list[dict[str, Any]]:
    """Pairs that prefer stopping: the answer, over the same answer running on into another
    chat's answer (what the base model does: it never ends its turn)."""
    rng = random.Random(seed + 1)
    rows = []
    for chat in chats[: max(1, len(chats) // 2)]:
        answer = chat[1]["content"]
        other = rng.choice(chats)[1]["content"]
        rows.append(
            {
                "prompt": [chat[0]],
                "chosen": [{"role": "assistant", "content": answer}],
                "rejected": [{"role": "assistant", "content": f"{answer} {other}"}],
            }
        )
    return rows


# --- phase 2 ---------------------------------------------------------------------------------


def phase2(
    *, platform: ArenaAgent, options: Options, votes: Path | None, phase: str | None,
    parent: int | None, progress: Progress,
) -> dict[str, Any]:  # fmt: skip
    """DPO from the phase-1 checkpoint on the agent's decisive battles, and nominate again."""
    recipe, run = options.recipe, options.run_dir
    # An export given by hand is read first: a bad one stops the agent before it does anything.
    report = preference_pairs(read_battles(votes)) if votes is not None else None
    _prepare(options, progress, f"phase 2, recipe {recipe.name}")
    start = _parent_checkpoint(platform, parent, phase)
    progress.say(f"starting from checkpoint {start['id']} ({start['path']})")
    if votes is None or report is None:
        votes = run / "votes.jsonl"
        progress.say("exporting the votes on my model (arena-agent votes export)")
        platform.votes_export(votes, phase=phase)
        report = preference_pairs(read_battles(votes))
    progress.say(f"{votes}: {report.describe()}")
    prompts = dataset.held_out_prompts(options.seed, options.eval_prompts, exclude=[])
    if not report.pairs:
        progress.say(
            "no decisive battle gives a preference pair: nothing to learn from the votes, so "
            f"I nominate checkpoint {start['id']} again"
        )
        card = renomination_card(start, report, _previous_card(platform, start["id"]))
        return _nominate_and_finish(platform, options, progress, start, card, [])
    pairs_file = run / "data" / "vote-preferences.jsonl"
    dataset.write_jsonl(pairs_file, [pair.as_dpo_row() for pair in report.pairs])
    record = _register_data(
        platform, options, progress, pairs_file, model=Path(start["path"]),
        sources=[f"arena-votes:{phase or 'latest'} (my battles, {report.battles} exported)"],
        licence="RSI Arena vote records, for use in this competition",
        reason=(
            f"DPO on the {len(report.pairs)} decisive battles of my model: the winner's answer "
            "is chosen, the loser's rejected"
        ),
    )  # fmt: skip
    dpo = _train(
        platform, options, progress, kind="dpo", model=Path(start["path"]), data=pairs_file,
        prompts=prompts, steps=options.dpo_steps,
    )  # fmt: skip
    _check_stops(options, dpo.summary, "DPO")
    checkpoint = _register_checkpoint(
        platform, progress, dpo, data=[record["id"]], parent=start["id"]
    )
    stages = [(dpo, record, checkpoint)]
    card = model_card(
        title=f"reference agent, recipe {recipe.name}, phase 2 (DPO on votes)",
        base_model=start["path"],
        stages=stages,
        parent=start["id"],
        before=None,
        notes=[f"Preference data: {report.describe()}."],
        inherited=lineage_datasets(platform, start["id"]),
    )
    return _nominate_and_finish(platform, options, progress, checkpoint, card, stages)


def lineage_datasets(platform: ArenaAgent, checkpoint_id: int) -> list[str]:
    """The data sets of a checkpoint and its ancestors, as the card's `datasets` names them."""
    checkpoints = {c["id"]: c for c in platform.checkpoints()}
    records = {r["id"]: r for r in platform.data_records()}
    named = []
    current: int | None = checkpoint_id
    while current is not None and current in checkpoints:
        for record_id in checkpoints[current]["data_records"]:
            record = records[record_id]
            named.append(
                f"{', '.join(record['sources'])} (data record {record['id']}, inherited from "
                f"checkpoint {current})"
            )
        current = checkpoints[current]["parent"]
    return named


def _parent_checkpoint(platform: ArenaAgent, parent: int | None, phase: str | None) -> dict:
    checkpoints = {c["id"]: c for c in platform.checkpoints()}
    if parent is None:
        nominations = sorted(platform.nominations(), key=lambda n: n["updated_at"])
        if phase is not None:
            nominations = [n for n in nominations if n["phase"] == phase] or nominations
        if not nominations:
            raise AgentFailure("no nomination to start from: run phase 1 first, or pass --parent")
        parent = nominations[-1]["checkpoint"]
    if parent not in checkpoints:
        raise AgentFailure(f"checkpoint {parent} is not one of mine")
    return checkpoints[parent]


def _previous_card(platform: ArenaAgent, checkpoint: int) -> dict[str, Any]:
    for nomination in sorted(platform.nominations(), key=lambda n: n["updated_at"], reverse=True):
        if nomination["checkpoint"] == checkpoint:
            return nomination["model_card"]
    return {}


# --- steps shared by both phases -------------------------------------------------------------


def _prepare(options: Options, progress: Progress, what: str) -> None:
    if not Path(options.python).is_file() or not os.access(options.python, os.X_OK):
        raise AgentFailure(
            f"the training interpreter {options.python} is not there: pass --python or set "
            "ARENA_TRAIN_PYTHON (the cluster's is built by infra/training_env/setup.sh)"
        )
    options.run_dir.mkdir(parents=True, exist_ok=True)
    progress.say(f"{what}; working in {options.run_dir}")


def _register_data(
    platform: ArenaAgent, options: Options, progress: Progress, path: Path, *, model: Path,
    sources: list[str], licence: str, reason: str,
) -> dict[str, Any]:  # fmt: skip
    counted = subprocess.run(
        [options.python, "-m", "agents.reference.measure", "--model", str(model), "--data", str(path)],
        capture_output=True, text=True, env=_job_env(), cwd=options.run_dir, check=False,
    )  # fmt: skip
    if counted.returncode != 0:
        raise AgentFailure(f"counting the tokens of {path} failed:\n{counted.stderr[-2000:]}")
    size = json.loads(counted.stdout.strip().splitlines()[-1])
    record = platform.data_register(
        path, rows=size["rows"], tokens=size["tokens"], sources=sources, licence=licence,
        reason=reason,
    )  # fmt: skip
    progress.say(
        f"registered {path.name}: data record {record['id']}, {size['rows']} rows, "
        f"{size['tokens']} tokens, sha256 {record['sha256'][:12]}"
    )
    return record


def _train(
    platform: ArenaAgent, options: Options, progress: Progress, *, kind: str, model: Path,
    data: Path, prompts: list[str], steps: int,
) -> Trained:  # fmt: skip
    stage = options.run_dir / kind
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "eval-prompts.json").write_text(json.dumps(prompts, indent=1), encoding="utf-8")
    command = [
        "-m", f"agents.reference.train_{kind}", "--model", str(model), "--data", str(data),
        "--out", str(stage / "checkpoint"), "--method", options.recipe.method,
        "--steps", str(steps), "--seed", str(options.seed),
        "--eval-prompts", str(stage / "eval-prompts.json"), "--summary", str(stage / "summary.json"),
    ]  # fmt: skip
    name = f"ref-{options.recipe.name}-{kind}"
    script = stage / "train.sbatch"
    script.write_text(
        render_job_script(
            job_name=name, nodes=options.nodes, gpus_per_node=options.gpus,
            time_limit_minutes=options.minutes, workdir=stage.resolve(), python=options.python,
            command=command, env=_job_env(),
        ),
        encoding="utf-8",
    )  # fmt: skip
    job = platform.submit(
        script, name=name, minutes=options.minutes, gpus=options.gpus, nodes=options.nodes,
        workdir=stage.resolve(),
    )  # fmt: skip
    progress.say(
        f"submitted {kind.upper()} job {job['id']}: {options.nodes} node(s) x {options.gpus} "
        f"GPU(s), torchrun, {steps} steps, at most {options.minutes} min"
    )
    done = _wait(platform, options, progress, job["id"])
    if done["state"] != "COMPLETED":
        raise AgentFailure(
            f"{kind.upper()} job {job['id']} ended {done['state']}; the end of its output:\n"
            f"{done.get('output_tail', '')[-3000:]}"
        )
    summary = json.loads((stage / "summary.json").read_text(encoding="utf-8"))
    progress.say(
        f"{kind.upper()} job {job['id']} completed: {summary['steps']} steps, final loss "
        f"{summary['final_loss']}, {done['gpu_hours_charged']} GPU-h, end-of-turn rate "
        f"{summary.get('end_of_turn_rate_before', '-')} -> {summary['end_of_turn_rate_after']}"
    )
    return Trained(done, summary, stage / "checkpoint")


def _wait(
    platform: ArenaAgent, options: Options, progress: Progress, job_id: str
) -> dict[str, Any]:
    """Poll the job until it ends, saying each change of state and the training log lines."""
    deadline = time.monotonic() + options.max_wait_minutes * 60
    seen_state, read = "", 0
    while True:
        job = platform.job(job_id)
        state = job["state"] + (f" ({job['reason']})" if job.get("reason") else "")
        if state != seen_state:
            progress.say(f"job {job_id}: {state}")
            seen_state = state
        read = _echo_log(Path(job["stdout"]), read, progress, job_id) if job.get("stdout") else 0
        if job["state"] in TERMINAL:
            return job
        if time.monotonic() > deadline:
            raise AgentFailure(
                f"job {job_id} is still {job['state']} after {options.max_wait_minutes:g} min; "
                f"it is left as it is (arena-agent cancel {job_id} stops it)"
            )
        time.sleep(options.poll_s)


def _echo_log(path: Path, offset: int, progress: Progress, job_id: str) -> int:
    try:
        with path.open("rb") as out:
            out.seek(offset)
            chunk = out.read()
    except OSError:
        return offset
    complete = chunk[: chunk.rfind(b"\n") + 1]  # whole lines only; the rest next time
    for line in complete.decode(errors="replace").splitlines():
        if line.startswith(JOB_LOG_PREFIXES):
            progress.say(f"  job {job_id} | {_compact(line)[:200]}")
    return offset + len(complete)


def _compact(line: str) -> str:
    """The trainer's logging dicts, shortened to what says whether training goes well."""
    if not line.startswith("{'loss'"):
        return line
    try:
        values = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return line
    return "trainer: " + ", ".join(f"{k} {values[k]}" for k in TRAINER_LOG_KEYS if k in values)


def _check_stops(options: Options, summary: dict[str, Any], what: str) -> None:
    rate = summary["end_of_turn_rate_after"]
    if rate < options.min_end_of_turn_rate:
        raise AgentFailure(
            f"the {what} model ends its turn on only {rate:.0%} of my held-out prompts (I need "
            f"{options.min_end_of_turn_rate:.0%}): not registering or nominating it"
        )


def _register_checkpoint(
    platform: ArenaAgent, progress: Progress, trained: Trained, *, data: list[int],
    parent: int | None,
) -> dict[str, Any]:  # fmt: skip
    checkpoint = platform.checkpoint_register(
        trained.checkpoint_dir.resolve(), job=trained.job["id"], data=data, parent=parent
    )
    progress.say(
        f"registered checkpoint {checkpoint['id']} (job {trained.job['id']}, data {data}, "
        f"parent {parent or '-'}): {checkpoint['architecture']}, {checkpoint['parameters']:,} "
        f"parameters, ends its turn with {checkpoint['end_of_turn_token']}"
    )
    return checkpoint


def _nominate_and_finish(
    platform: ArenaAgent, options: Options, progress: Progress, checkpoint: dict[str, Any],
    card: str, stages: list[tuple[Trained, dict[str, Any], dict[str, Any]]],
) -> dict[str, Any]:  # fmt: skip
    card_path = options.run_dir / "MODEL_CARD.md"
    card_path.write_text(card, encoding="utf-8")
    progress.say(platform.nominate(checkpoint["id"], card_path))
    result = {
        "recipe": options.recipe.name,
        "nominated_checkpoint": checkpoint["id"],
        "checkpoint_path": checkpoint["path"],
        "model_card": str(card_path),
        "jobs": [trained.job["id"] for trained, _, _ in stages],
        "data_records": [record["id"] for _, record, _ in stages],
        "checkpoints": [registered["id"] for _, _, registered in stages],
        "gpu_hours": round(sum(t.job["gpu_hours_charged"] for t, _, _ in stages), 4),
        "summaries": [{k: v for k, v in t.summary.items() if k != "samples"} for t, _, _ in stages],
        "seconds": round(time.monotonic() - progress.started, 1),
    }
    (options.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    progress.say(
        f"done: nominated checkpoint {checkpoint['id']}; see {options.run_dir}/result.json"
    )
    return result


def _job_env() -> dict[str, str]:
    """What every job and local step needs: this code on the path, no hub, the sandbox home."""
    return {
        "PYTHONPATH": str(CODE_ROOT),
        "HOME": str(Path.home()),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }


# --- model cards -----------------------------------------------------------------------------


def model_card(
    *, title: str, base_model: str, stages: list[tuple[Trained, dict[str, Any], dict[str, Any]]],
    parent: int | None, before: float | None, notes: list[str] | None = None,
    inherited: list[str] | None = None,
) -> str:  # fmt: skip
    """Markdown with YAML front matter (the fields the audit checks against the run logs).
    `inherited`: the data the parent checkpoint's lineage was trained on, which this model
    was trained on too."""
    summaries = [trained.summary for trained, _, _ in stages]
    jobs = [trained.job for trained, _, _ in stages]
    first = summaries[0]
    gpus = max(job["gpus"] for job in jobs)
    nodes = max(job["nodes"] for job in jobs)
    hardware = (
        f"{gpus} x GPU ({nodes} node(s), torchrun with {first['world_size']} processes, "
        f"{first['backend']} backend{' on CPU' if first['backend'] == 'gloo' else ''})"
    )
    front = {
        "training_method": " + ".join(s["method"] for s in summaries),
        "steps": sum(int(s["steps"]) for s in summaries),
        "gpu_hours": round(sum(float(job["gpu_hours_charged"]) for job in jobs), 4),
        "hardware": hardware,
        "datasets": [
            f"{', '.join(record['sources'])} (data record {record['id']}, {record['rows']} rows, "
            f"{record['tokens']} tokens)"
            for _, record, _ in stages
        ]
        + list(inherited or []),
        "base_model": base_model,
        "parent_checkpoint": parent,
        "jobs": [job["id"] for job in jobs],
        "end_of_turn_rate": {
            "before": before,
            "after": summaries[-1]["end_of_turn_rate_after"],
            "held_out_prompts": summaries[-1]["eval_prompts"],
        },
    }
    lines = [f"# {title}", ""]
    for (trained, record, registered), summary in zip(stages, summaries, strict=True):
        lines.append(
            f"- checkpoint {registered['id']}: {summary['method']}, {summary['steps']} steps, "
            f"final loss {summary['final_loss']}, job {trained.job['id']} "
            f"({trained.job['gpu_hours_charged']} GPU-h), data record {record['id']}"
        )
    if notes:
        lines += ["", *notes]
    samples = summaries[-1].get("samples") or {}
    if samples:
        lines += ["", "Replies to held-out prompts:", ""]
        lines += [f"- {prompt!r} -> {reply!r}" for prompt, reply in samples.items()]
    return _front_matter(front) + "\n".join(lines).rstrip() + "\n"


def renomination_card(
    checkpoint: dict[str, Any], report: PairsReport, previous: dict[str, Any]
) -> str:
    front = {
        "training_method": str(previous.get("training_method", "unchanged")),
        "steps": int(previous.get("steps", 0)),
        "gpu_hours": float(previous.get("gpu_hours", 0.0)),
        "hardware": str(previous.get("hardware", "none in this phase")),
        "datasets": list(previous.get("datasets", [])),
        "renominated_checkpoint": checkpoint["id"],
    }
    body = (
        f"# reference agent: checkpoint {checkpoint['id']} nominated again\n\n"
        f"The vote export had {report.describe()}: no decisive battle to learn from, so no new "
        "training was done in this phase and the earlier checkpoint stands.\n"
    )
    return _front_matter(front) + body


def _front_matter(fields: dict[str, Any]) -> str:
    # JSON values are valid YAML (flow style): no YAML library needed in the sandbox.
    return (
        "---\n"
        + "".join(f"{key}: {json.dumps(value)}\n" for key, value in fields.items())
        + "---\n"
    )
