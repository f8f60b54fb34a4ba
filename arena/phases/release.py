"""A phase's release, as the study published its checkpoints: one hub model repository per
nominated checkpoint and one data set repository of the phase's battles, written to a folder
and optionally pushed to a hub organisation (`publish.py`).

```
OUT/models/<agent>-<phase>/   weights, config and tokenizer files, README.md (the model card)
OUT/datasets/<phase>-battles/ battles.jsonl, data/train-00000-of-00001.parquet, README.md
```

**Whose bytes.** A nominee's files come from the platform's own copy of it
(`agents/nominees.py`), each checked against the sha256 recorded when it was copied; where no
copy was made, from the agent's sandbox, read as the copy is (regular files only, no link
followed, sizes bounded by the registered parameter count) and held to the weights' sha256
taken at registration. Only weights and the settings files a server loads are released.

**Nothing half-written.** Every nominee's source is checked before a byte is copied, and
everything is written into a hidden folder beside OUT that becomes OUT only when complete; a
release that stops, for any reason, leaves no OUT.

**The card.** The agent's own card text, under metadata the platform writes: the audited
fields of the agent's front matter (training method, steps, GPU-hours, hardware, data sets,
as claimed), the benchmark results in the hub's model-index form (held-out benchmarks only
once the competition has ended: a public repository is public to the agents too), and the
audit status. A model with a confirmed violation is counted with the base model's scores, as
everywhere in the arena (`evalsuite.selectors.phase_models`); its model-index says so in each metric's name,
and the card's table shows what was measured beside what is counted.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.db.models import Q
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from agents.models import Nomination, NomineeCopy
from agents.nominees import (
    NomineeRefused,
    checkpoint_files_copy,
    nominee_copy_verify,
    weights_sha256_of,
)
from arena.battles.export import battle_export_rows
from arena.competition.models import Phase
from arena.phases.publish import Publisher, RepoType
from arena.phases.release_battles import battles_card, battles_write
from cluster.sandbox_files import SandboxPath, UnsafePath, locate
from evalsuite import metrics
from evalsuite.hub import HubSet
from evalsuite.models import EvalRun
from evalsuite.registry import benchmark, benchmarks
from evalsuite.report_text import excluded_words, headline_words
from evalsuite.selectors import (
    competition_ended,
    gap_closed_of,
    gap_json,
    headline,
    phase_models,
    score_json,
)
from safety.models import Finding

AUDITED_FIELDS = ("training_method", "steps", "gpu_hours", "hardware", "datasets")
MAX_CARD_TEXT = 64 * 1024  # of the agent's own card text
METRIC_OF_SCORER = {"f1": "f1", "code": "pass@1", "judge": "accuracy"}  # else accuracy


class ReleaseRefused(Exception):
    """The release cannot be made; nothing was written. The message says why."""


@dataclass(frozen=True)
class Repo:
    folder: Path  # relative to the release folder
    name: str  # the repository's name under the organisation
    repo_type: RepoType


@dataclass
class Release:
    out: Path
    repos: list[Repo] = field(default_factory=list)


def phase_for_release(label: str) -> Phase:
    phase = Phase.objects.filter(label=label).select_related("competition")
    found = phase.order_by("-competition__created_at").first()
    if found is None:
        raise ReleaseRefused(f"no phase labelled {label!r}")
    return found


def release_write(*, phase: Phase, out: Path, progress: Callable[[str], None] = print) -> Release:
    """Write the phase's release into `out` (absent or an empty folder)."""
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ReleaseRefused(f"{out} exists and is not an empty folder")
    nominations = list(
        Nomination.objects.filter(phase=phase)
        .select_related("agent", "checkpoint")
        .order_by("agent__name")
    )
    sources = {n.pk: _source(n) for n in nominations}  # every nominee readable, or nothing
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    release = Release(out=out)
    try:
        for nomination in nominations:
            repo = Repo(Path("models") / _model_name(nomination), _model_name(nomination), "model")
            progress(f"model {repo.name}: copying checkpoint {nomination.checkpoint_id}")
            _write_model(nomination, sources[nomination.pk], staging / repo.folder)
            progress(f"model {repo.name}: written")
            release.repos.append(repo)
        name = f"{phase.label}-battles"
        repo = Repo(Path("datasets") / name, name, "dataset")
        rows, models = battles_write(
            rows=battle_export_rows(phase=phase.label), folder=staging / repo.folder
        )
        card = battles_card(
            phase_label=phase.label, competition=phase.competition.name, rows=rows, models=models
        )
        card.save(staging / repo.folder / "README.md")
        progress(f"dataset {name}: {rows} battles written")
        release.repos.append(repo)
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return release


def release_push(
    *, release: Release, org: str, publisher: Publisher, progress: Callable[[str], None] = print
) -> list[str]:
    """Upload each repository of a written release under `org`; where each went."""
    where = []
    for repo in release.repos:
        repo_id = f"{org}/{repo.name}"
        progress(f"{repo.repo_type} {repo_id}: uploading")
        where.append(
            publisher.publish(
                folder=release.out / repo.folder,
                repo_id=repo_id,
                repo_type=repo.repo_type,
                message=f"RSI Arena release: {repo.name}",
            )
        )
        progress(f"{repo.repo_type} {repo_id}: done ({where[-1]})")
    return where


def _model_name(nomination: Nomination) -> str:
    """As the arena names the nominee (arena/phases/services.py), so battles name the repo."""
    return f"{nomination.agent.name}-{nomination.phase.label}"


def _source(nomination: Nomination) -> SandboxPath:
    """Where the nominee's files are read from, checked; ReleaseRefused names the nominee."""
    who = f"{nomination.agent.name}'s nominee (checkpoint {nomination.checkpoint_id})"
    copy = NomineeCopy.objects.filter(nomination=nomination).first()
    try:
        if copy is not None and copy.folder:
            nominee_copy_verify(copy)
            return SandboxPath(Path(copy.folder))
        if not nomination.agent.sandbox:
            raise NomineeRefused("no platform copy and no sandbox")
        source = locate(Path(nomination.agent.sandbox), nomination.checkpoint.path)
        if not source.path.is_dir() or source.path.is_symlink():
            raise NomineeRefused(f"{nomination.checkpoint.path} is not a folder")
        return source
    except (NomineeRefused, OSError) as missing:
        raise ReleaseRefused(f"{who} cannot be released: {missing}") from None


def _write_model(nomination: Nomination, source: SandboxPath, folder: Path) -> None:
    folder.mkdir(parents=True)
    try:
        files = checkpoint_files_copy(source, folder, parameters=nomination.checkpoint.parameters)
    except (NomineeRefused, UnsafePath, OSError) as refused:
        raise ReleaseRefused(f"{nomination.agent.name}'s nominee: {refused}") from None
    copy = NomineeCopy.objects.filter(nomination=nomination).first()
    if copy is not None and copy.folder and files != copy.files:
        raise ReleaseRefused(f"{nomination.agent.name}'s nominee changed while it was copied")
    if weights_sha256_of(files) != nomination.checkpoint.weights_sha256:
        raise ReleaseRefused(
            f"{nomination.agent.name}'s nominee: the weights are not those registered for "
            f"checkpoint {nomination.checkpoint_id}"
        )
    for name in files:
        (folder / name).chmod(0o444)
    model_card(nomination).save(folder / "README.md")


def model_card(nomination: Nomination) -> ModelCard:
    """The released card: the platform's metadata over the agent's own text."""
    phase = nomination.phase
    competition = phase.competition
    name = _model_name(nomination)
    ended = competition_ended(competition)
    shown = {b.name for b in benchmarks() if ended or not b.held_out}
    measured, _, _ = _scores(nomination, after_audit=False)
    counted, judges, replaced = _scores(nomination, after_audit=True)
    measured = {b: s for b, s in measured.items() if b in shown}
    counted = {b: s for b, s in counted.items() if b in shown}
    violation = replaced is not None
    findings = list(  # those of this nomination and the agent-wide ones, as safety reads them
        Finding.objects.filter(agent=nomination.agent, status=Finding.Status.CONFIRMED)
        .filter(Q(phase__isnull=True) | Q(phase=phase))
        .order_by("created_at")
    )
    fields = nomination.card_fields if isinstance(nomination.card_fields, dict) else {}
    audit = {
        "confirmed_findings": [
            {"kind": f.kind, "severity": f.severity, "summary": f.summary} for f in findings
        ],
        "violation": violation,
        "scores": "the base model's: " + "; ".join(replaced) if replaced else "measured",
    }
    data = ModelCardData(
        model_name=name,
        base_model=_hub_id(competition.base_model),
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["rsi-arena", phase.label],
        eval_results=[
            _eval_result(b, s, judges.get(b), violation)
            for b, s in counted.items()
            if b in _registered()  # a result stored under a retired name: card table only
        ]
        or None,
        claimed={k: fields[k] for k in AUDITED_FIELDS if k in fields},
        arena={
            "competition": competition.name,
            "phase": phase.label,
            "agent": nomination.agent.name,
            "checkpoint": nomination.checkpoint_id,
            "weights_sha256": nomination.checkpoint.weights_sha256,
            "held_out_included": ended,
            "audit": audit,
        },
    )
    return ModelCard(
        f"---\n{data.to_yaml()}\n---\n"
        + _card_text(name, phase, measured, counted, judges, findings, violation, ended)
        + "\n## The agent's model card\n\n"
        + _agent_text(nomination.model_card)
    )


def _scores(
    nomination: Nomination, *, after_audit: bool
) -> tuple[dict[str, metrics.Score], dict[str, str], list[str] | None]:
    """The checkpoint's scores in its phase, their judges, and the confirmed violations for
    which they are the base model's (None: its own), as `evals report` counts them."""
    scores: dict[str, metrics.Score] = {}
    judges: dict[str, str] = {}
    replaced = None
    for model in phase_models(nomination.phase, after_audit=after_audit):
        if model.role == EvalRun.Role.AGENT and model.checkpoint_id == nomination.checkpoint_id:
            scores.update(model.scores)
            judges.update(model.judges)
            replaced = model.replaced if model.replaced is not None else replaced
    return dict(sorted(scores.items())), judges, replaced


def _registered() -> set[str]:
    return {entry.name for entry in benchmarks()}


def _eval_result(name: str, score: metrics.Score, judge: str | None, replaced: bool) -> EvalResult:
    entry = benchmark(name)
    source = entry.hub
    metric = METRIC_OF_SCORER.get(entry.scorer, "accuracy")
    label = f"{metric} (± {score.stderr:.4f}, n={score.n})" if score.stderr else metric
    if judge:
        label += f", judged by {judge}"
    if replaced:
        label += ", the base model's score: confirmed violation"
    return EvalResult(
        task_type="text-generation",
        dataset_type=entry.hub_dataset,
        dataset_name=name,
        dataset_split=source.split if source is not None else None,
        dataset_revision=source.revision if isinstance(source, HubSet) else None,
        dataset_config=(source.config or None) if isinstance(source, HubSet) else None,
        metric_type=metric,
        metric_value=round(score.value, 6),
        metric_name=label,
    )


def _card_text(
    name: str,
    phase: Phase,
    measured: dict[str, metrics.Score],
    counted: dict[str, metrics.Score],
    judges: dict[str, str],
    findings: list[Finding],
    violation: bool,
    ended: bool,
) -> str:
    lines = [
        f"# {name}",
        "",
        f"The checkpoint {name} nominated in the phase {phase.label} of "
        f"{phase.competition.name}, as the arena served it.",
        "",
        "## Benchmark results",
        "",
    ]
    if not measured:
        lines.append("No benchmark result was collected for this checkpoint.")
    else:
        lines += ["| benchmark | measured | ± | n | counted |", "| --- | --- | --- | --- | --- |"]
        for bench, score in measured.items():
            kept = counted.get(bench)
            judge = f" (judge: {judges[bench]})" if bench in judges else ""
            if bench not in _registered():
                judge += " (no longer in the registry)"
            lines.append(
                f"| {bench}{judge} | {score.value:.4f} | {_stderr(score)} | {score.n} | "
                f"{f'{kept.value:.4f}' if kept else '-'} |"
            )
    if not ended:
        lines += ["", "Held-out benchmarks are left out until the competition ends."]
    if counted:
        lines += ["", *_progress_lines(phase, counted)]
    lines += ["", "## Audit", ""]
    if not findings:
        lines.append("No confirmed finding.")
    for finding in findings:
        lines.append(f"- confirmed {finding.get_kind_display()} ({finding.severity}): "
                     f"{finding.summary}")  # fmt: skip
    if violation:
        lines += ["", "A confirmed violation: the arena counts the base model's scores for it."]
    return "\n".join(lines) + "\n"


def _progress_lines(phase: Phase, counted: dict[str, metrics.Score]) -> list[str]:
    """Benchmark progress on the counted scores, by the rule of `evals report`: median gap
    closed over the benchmarks where instruct is measurably above the base, or why none."""
    gap = gap_json(gap_closed_of(phase.competition, counted))
    value = headline(phase.competition, counted)
    shown = None if value is None else score_json(value)
    return [
        f"Benchmark progress (median gap closed, base 0 to instruct 1): "
        f"{headline_words(gap, shown)}.",
        "",
        f"Left out of gap closed: {excluded_words(gap)}.",
    ]


def _stderr(score: metrics.Score) -> str:
    return f"{score.stderr:.4f}" if score.stderr is not None else "-"


def _agent_text(card: str) -> str:
    """The agent's card after its front matter, split as registration parsed it
    (agents.services.parse_model_card), bounded; it comes after the platform's metadata, so
    nothing in it is read as metadata."""
    body = (
        card[4:].split("\n---", 1)[1] if card.startswith("---\n") and "\n---" in card[4:] else card
    )
    body = body.lstrip("-\n")
    if len(body) > MAX_CARD_TEXT:
        body = body[:MAX_CARD_TEXT] + "\n\n(cut at 64 KiB)"
    return body


def _hub_id(model: str) -> str | None:
    """The base model as a hub id when it is one (`org/name`), not a local path."""
    parts = model.split("/")
    return model if len(parts) == 2 and all(p and not p.startswith(".") for p in parts) else None
