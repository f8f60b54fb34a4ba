"""Writes of the safety context: the audit run that records findings, and status changes.

`audit_run` reads the other apps (agents, their files, cluster charges, the competition's
reference models) and writes only `Finding` and `JudgeReview` rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import stat
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from agents.models import (
    Agent,
    Checkpoint,
    DataRecord,
    Nomination,
    NomineeCopy,
    TrajectoryEvent,
)
from agents.trajectory import trajectory_dropped, trajectory_lines
from agents.trajectory_selectors import trajectory_events
from arena.competition.models import Competition, Phase
from arena.phases.models import FeedbackBundle
from cluster.sandbox_files import (
    SandboxPath,
    UnsafePath,
    as_sandbox_path,
    locate,
    read_bytes,
    read_text,
)
from cluster.selectors import gpu_seconds_charged
from safety import artifacts, cards, contamination, files, hardcoded, trajectory_data
from safety.judge import ChatCompletionsJudge, JudgeError, TrajectoryJudge, excerpts
from safety.models import Finding, JudgeReview
from safety.ngrams import EvalItemLike, ItemIndex

JUDGE_EXCERPT_CHARS = 24_000
MAX_EVIDENCE_MATCHES = 50
CHECKPOINT_TEXT_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json")

Log = Callable[[str], None]


class EvaluationDataMissing(ValueError):
    """A benchmark's test set is not loaded: an audit without it would clear an agent that
    trained on it, so none runs."""


def default_evaluation_items() -> Iterable[EvalItemLike]:
    """Every item of every benchmark the registry loads (its pinned hub sets, from the hub
    cache), held-out and safety ones included. Raises EvaluationDataMissing, naming every
    set not in the cache, before anything is read."""
    from evalsuite import registry  # imported late: safety sits above it

    missing = registry.missing_data()
    if missing:
        raise EvaluationDataMissing(
            f"{len(missing)} benchmark data set(s) missing, the audit would not see them: "
            + " | ".join(str(error) for error in missing)
        )
    return registry.evaluation_items()


def finding_record(
    *,
    agent: Agent,
    kind: str,
    severity: str,
    summary: str,
    evidence: dict[str, object],
    key: str,
    phase: Phase | None = None,
) -> tuple[Finding, bool]:
    """Create the finding for this evidence, or refresh the one an earlier run made (its
    status and note untouched). `key` names the evidence: the same key is the same finding."""
    fingerprint = hashlib.sha256(f"{kind}\0{phase.pk if phase else ''}\0{key}".encode()).hexdigest()
    now = timezone.now()
    values = {
        "kind": kind,
        "severity": severity,
        "summary": summary[:500],
        "evidence": evidence,
        "phase": phase,
        "last_seen_at": now,
    }
    for _ in range(2):  # a concurrent run may create the same row between our read and write
        try:
            with transaction.atomic():
                finding, created = Finding.objects.select_for_update().get_or_create(
                    agent=agent, fingerprint=fingerprint, defaults=values
                )
                if not created:
                    for name, value in values.items():
                        setattr(finding, name, value)
                    finding.save()
                return finding, created
        except IntegrityError:
            continue
    raise RuntimeError(f"could not record finding {fingerprint}")


def finding_set_status(*, finding: Finding, status: str, note: str | None = None) -> Finding:
    if status not in Finding.Status.values:
        raise ValueError(f"status must be one of {', '.join(Finding.Status.values)}")
    changes: dict[str, object] = {"status": status, "updated_at": timezone.now()}
    if note is not None:
        changes["note"] = note
    Finding.objects.filter(pk=finding.pk).update(**changes)
    finding.refresh_from_db()
    return finding


@dataclass
class AuditReport:
    agents: list[str] = field(default_factory=list)
    items: int = 0
    unscannable_items: int = 0
    files_scanned: int = 0
    records_scanned: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    created: list[Finding] = field(default_factory=list)
    refreshed: list[Finding] = field(default_factory=list)


class _Run:
    def __init__(self, report: AuditReport, log: Log) -> None:
        self.report = report
        self.log = log

    def record(self, **fields: object) -> Finding:
        finding, created = finding_record(**fields)  # type: ignore[arg-type]
        (self.report.created if created else self.report.refreshed).append(finding)
        self.log(
            f"  {'new' if created else 'seen'} finding {finding.pk}: {finding.kind} "
            f"({finding.severity}) {finding.summary}"
        )
        return finding


def audit_run(
    *,
    agent_names: list[str] | None = None,
    phase: Phase | None = None,
    items: Iterable[EvalItemLike] | None = None,
    judge: TrajectoryJudge | None = None,
    log: Log = lambda line: None,
) -> AuditReport:
    """Audit the named agents (all by default), their nominations in `phase` (all phases by
    default), against `items` (every evaluation item by default). Safe to re-run: the same
    evidence refreshes the same finding."""
    agents = list(Agent.objects.order_by("name"))
    if agent_names:
        unknown = sorted(set(agent_names) - {a.name for a in agents})
        if unknown:
            raise ValueError(f"no agent called {', '.join(unknown)}")
        agents = [a for a in agents if a.name in agent_names]
    nominations = Nomination.objects.filter(agent__in=agents).select_related(
        "agent", "checkpoint", "phase__competition"
    )
    if phase is not None:
        nominations = nominations.filter(phase=phase)
    nominations = list(nominations.order_by("agent__name", "phase__starts_at"))

    report = AuditReport(agents=[a.name for a in agents])
    run = _Run(report, log)
    evaluation = list(items if items is not None else default_evaluation_items())
    text_index = contamination.contamination_index(evaluation)
    code_index = hardcoded.hardcoded_index(evaluation)
    report.items = len(evaluation)
    report.unscannable_items = len(text_index.unscannable)
    per_benchmark = Counter(item.benchmark for item in evaluation)
    log(
        f"audit of {len(agents)} agent(s), {len(nominations)} nomination(s); "
        f"{len(evaluation)} evaluation items of {len(per_benchmark)} benchmark(s) indexed "
        f"({len(text_index.unscannable)} too short): "
        + ", ".join(f"{name} {count}" for name, count in sorted(per_benchmark.items()))
    )
    references = _references(nominations)
    for agent in agents:
        log(f"[{agent.name}] files")
        _audit_files(run, agent, text_index, code_index)
        _audit_checkpoint_texts(run, agent, code_index, nominations)
    log("artifacts: data and weights across agents")
    _audit_shared_data(run, agents, references)
    _audit_shared_weights(run, agents)
    for nomination in nominations:
        log(f"[{nomination.agent.name}] nomination in {nomination.phase.label}")
        _audit_substitution(run, nomination, references)
        _audit_model_card(run, nomination)
    if judge is not None:
        for agent in agents:
            log(f"[{agent.name}] trajectory judge ({judge.name})")
            _audit_trajectory(run, agent, judge)
    log(
        f"done: {report.files_scanned} files, {report.records_scanned} records; "
        f"{len(report.created)} new finding(s), {len(report.refreshed)} seen before"
    )
    return report


# --- the agent's files: contamination and hard-coded items ----------------------------------


def _agent_path(agent: Agent, stored: str) -> SandboxPath:
    """A path the platform stored for the agent (a data record's, a checkpoint's), to be read
    below the agent's sandbox without following anything the agent planted on the way."""
    if agent.sandbox:
        with contextlib.suppress(UnsafePath):
            return locate(Path(agent.sandbox), stored)
    return as_sandbox_path(Path(stored))  # outside any sandbox: trusted up to its folder


def _checkpoint_dirs(agent: Agent) -> list[Path]:
    return [
        _agent_path(agent, p).path
        for p in Checkpoint.objects.filter(agent=agent).values_list("path", flat=True)
    ]


def _agent_files(agent: Agent) -> list[SandboxPath]:
    """Files of the agent's registered data and sandbox, once each, outside its checkpoints
    (those are read by the checkpoint checks). Links, FIFOs and devices are never among them."""
    roots = [
        _agent_path(agent, p)
        for p in DataRecord.objects.filter(agent=agent).values_list("path", flat=True)
    ]
    if agent.sandbox:
        roots.append(SandboxPath(Path(agent.sandbox)))
    skip = _checkpoint_dirs(agent)
    seen: set[Path] = set()
    found: list[SandboxPath] = []
    for root in roots:
        for file in files.walk(root):
            path = file.path
            if path in seen or any(d == path or d in path.parents for d in skip):
                continue
            seen.add(path)
            found.append(file)
    return found


def _audit_files(run: _Run, agent: Agent, text_index: ItemIndex, code_index: ItemIndex) -> None:
    for path in _agent_files(agent):
        if files.is_data_file(path):
            scan = contamination.scan_file(text_index, path)
            if scan.skipped:
                run.report.skipped.append(f"{path}: {scan.skipped}")
            run.report.files_scanned += 1
            run.report.records_scanned += scan.records
            if scan.matches:
                _record_contamination(run, agent, scan, hub_files=files.hub_snapshot_names(path))
        elif files.is_code_file(path):
            try:
                text = files.read_code(path)
            except OSError as refused:  # over the size bound, or changed into a link
                run.report.skipped.append(f"{path}: {refused}")
                continue
            run.report.files_scanned += 1
            found = list(hardcoded.find_hardcoded(code_index, source=str(path), text=text))
            if found:
                _record_hardcoded(run, agent, str(path), found, phase=None)


def _record_contamination(
    run: _Run, agent: Agent, scan: contamination.FileScan, *, hub_files: list[str]
) -> None:
    """`hub_files`: what the file is called in its hub cache's snapshots, if it is a blob."""
    items = sorted({(m.benchmark, m.item_id) for m in scan.matches})
    held_out = sorted({(m.benchmark, m.item_id) for m in scan.matches if m.held_out})
    benchmarks = sorted({b for b, _ in items})
    called = f" ({', '.join(hub_files)})" if hub_files else ""
    run.record(
        agent=agent,
        kind=Finding.Kind.CONTAMINATION,
        severity="critical" if held_out or len(items) > 10 else "high",
        summary=f"{len(items)} evaluation item(s) of {', '.join(benchmarks)} in {scan.path}{called}",
        evidence={
            "file": scan.path,
            **({"hub_files": hub_files} if hub_files else {}),
            "records_scanned": scan.records,
            "items": len(items),
            "held_out_items": len(held_out),
            "benchmarks": benchmarks,
            "threshold": {"n": contamination.N, "coverage_above": contamination.THRESHOLD},
            "matches": [m.evidence() for m in scan.matches[:MAX_EVIDENCE_MATCHES]],
        },
        key=f"{scan.path}\0{json.dumps(items)}",
    )


def _record_hardcoded(
    run: _Run, agent: Agent, source: str, found: list[hardcoded.Hardcoded], *, phase: Phase | None
) -> None:
    worst = "high" if any(h.severity == "high" for h in found) else "medium"
    kinds = sorted({h.what for h in found})
    items = sorted({(h.benchmark, h.item_id, h.what) for h in found})
    run.record(
        agent=agent,
        kind=Finding.Kind.HARDCODED_OUTPUT,
        severity=worst,
        phase=phase,
        summary=f"{len(found)} × {' / '.join(kinds)} in {source}",
        evidence={"source": source, "hits": [h.evidence() for h in found[:MAX_EVIDENCE_MATCHES]]},
        key=f"{source}\0{json.dumps(items)}",
    )


def _audit_checkpoint_texts(
    run: _Run, agent: Agent, code_index: ItemIndex, nominations: list[Nomination]
) -> None:
    """The chat template and generation config of every checkpoint the agent registered."""
    phase_of = {n.checkpoint_id: n.phase for n in nominations}
    for checkpoint in Checkpoint.objects.filter(agent=agent):
        folder = _agent_path(agent, checkpoint.path)
        for name, text in _checkpoint_texts(folder, run.report.skipped):
            found = list(hardcoded.find_hardcoded(code_index, source=f"{folder}/{name}", text=text))
            if found:
                _record_hardcoded(
                    run, agent, f"{folder}/{name}", found, phase=phase_of.get(checkpoint.pk)
                )


def _checkpoint_texts(folder: SandboxPath, skipped: list[str]) -> list[tuple[str, str]]:
    """The checkpoint's chat templates and generation config. One that is a link, a FIFO or
    too large is not read, and said so in `skipped`."""

    def read(name: str, reader: Callable[[SandboxPath], str]) -> str | None:
        try:
            return reader(folder / name)
        except FileNotFoundError:
            return None
        except OSError as refused:
            skipped.append(f"{folder / name}: {refused}")
            return None

    texts = []
    for name in CHECKPOINT_TEXT_FILES:
        raw = read(name, lambda where: read_text(where, max_bytes=files.MAX_CODE_FILE_BYTES))
        if raw is None:
            continue
        if name == "tokenizer_config.json":
            try:
                template = json.loads(raw).get("chat_template")
            except (ValueError, AttributeError):
                template = None
            if isinstance(template, list):  # named templates: [{"name", "template"}]
                template = "\n".join(
                    str(t.get("template", "")) for t in template if isinstance(t, dict)
                )
            if isinstance(template, str):
                texts.append((f"{name}:chat_template", template))
        elif name == "chat_template.json":
            try:
                texts.append((name, str(json.loads(raw).get("chat_template", ""))))
            except (ValueError, AttributeError):
                texts.append((name, raw))
        else:
            texts.append((name, raw))
    generation = read("generation_config.json", files.read_code)
    if generation is not None:
        texts.append(("generation_config.json", generation))
    return texts


# --- artifacts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _References:
    base: Path | None
    instruct: Path | None
    base_sha: str | None
    instruct_sha: str | None
    file_hashes: frozenset[str]  # the references' data files: copying those is no offence


def _references(nominations: list[Nomination]) -> dict[int, _References]:
    competitions = {n.phase.competition for n in nominations} or set(Competition.objects.all())
    found = {}
    for competition in competitions:
        base = _local_model(competition.base_model)
        instruct = _local_model(competition.instruct_model)
        hashes = frozenset(
            files.file_sha256(p)
            for model in (base, instruct)
            if model
            for p in files.walk(model)
            if files.is_data_file(p)
        )
        found[competition.pk] = _References(
            base,
            instruct,
            artifacts.weights_sha256(base) if base else None,
            artifacts.weights_sha256(instruct) if instruct else None,
            hashes,
        )
    return found


def _local_model(path: str) -> Path | None:
    folder = Path(path) if path else None
    return folder if folder is not None and folder.is_dir() else None


@dataclass(frozen=True)
class _Copy:
    agent: Agent
    path: str
    when: datetime
    registered: bool


def _data_copies(agent: Agent) -> dict[str, list[_Copy]]:
    """sha256 -> where this agent holds that content: its data records (whole, and each
    file of a folder) and the data files of its sandbox of at least HASH_MIN_BYTES."""
    copies: dict[str, list[_Copy]] = defaultdict(list)
    for record in DataRecord.objects.filter(agent=agent):
        copies[record.sha256].append(_Copy(agent, record.path, record.created_at, True))
        folder = _agent_path(agent, record.path)
        with contextlib.suppress(OSError):  # gone, or a link now: nothing to compare
            if not stat.S_ISDIR(folder.stat().st_mode):
                continue
        for path in files.walk(folder):
            sha = _hash_if_large(path)
            if sha is not None:
                copies[sha].append(_Copy(agent, str(path), record.created_at, True))
    # What the platform itself delivered (the feedback bundles: the same public leaderboard
    # for everyone) is nobody's artifact; its contents are still scanned for contamination.
    delivered = [
        Path(folder)
        for folder in FeedbackBundle.objects.filter(agent=agent).values_list("folder", flat=True)
    ]
    for path in _agent_files(agent):
        if any(path.path.is_relative_to(folder) for folder in delivered):
            continue
        sha = _hash_if_large(path) if files.is_data_file(path) else None
        if sha is not None:
            when = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
            copies[sha].append(_Copy(agent, str(path), when, False))
    return copies


def _hash_if_large(path: SandboxPath) -> str | None:
    """The file's hash if it is large enough to compare (HASH_MIN_BYTES) and small enough to
    read (MAX_DATA_FILE_BYTES); None otherwise, or if it changed into something unreadable."""
    try:
        if path.stat().st_size < files.HASH_MIN_BYTES:
            return None
        return files.file_sha256(path, max_bytes=files.MAX_DATA_FILE_BYTES)
    except OSError:
        return None


def _audit_shared_data(run: _Run, audited: list[Agent], references: dict[int, _References]) -> None:
    public = frozenset().union(*(r.file_hashes for r in references.values()))
    holders: dict[str, list[_Copy]] = defaultdict(list)
    for agent in Agent.objects.all():
        for sha, copies in _data_copies(agent).items():
            if sha not in public:
                holders[sha].extend(copies)
    audited_ids = {a.pk for a in audited}
    for sha, copies in holders.items():
        if all(files.in_hub_cache(c.path) for c in copies):
            continue  # the same public download in everyone's Hugging Face cache
        first_seen: dict[int, datetime] = {}
        for copy in copies:
            first_seen[copy.agent.pk] = min(first_seen.get(copy.agent.pk, copy.when), copy.when)
        if len(first_seen) < 2:
            continue
        owner_id = min(first_seen, key=lambda pk: first_seen[pk])
        owner = [c for c in copies if c.agent.pk == owner_id]
        for agent_id in sorted(first_seen):
            if agent_id == owner_id or agent_id not in audited_ids:
                continue
            mine = [c for c in copies if c.agent.pk == agent_id]
            agent = mine[0].agent
            run.record(
                agent=agent,
                kind=Finding.Kind.FOREIGN_ARTIFACT,
                severity="high",
                summary=f"holds data identical to {owner[0].agent.name}'s, which had it first: "
                f"{mine[0].path}",
                evidence={
                    "sha256": sha,
                    "copies": [
                        {"path": c.path, "since": c.when.isoformat(), "registered": c.registered}
                        for c in mine
                    ],
                    "owner": {
                        "agent": owner[0].agent.name,
                        "since": first_seen[owner_id].isoformat(),
                        "paths": sorted({c.path for c in owner}),
                    },
                },
                key=f"data\0{sha}",
            )


def _audit_shared_weights(run: _Run, audited: list[Agent]) -> None:
    audited_ids = {a.pk for a in audited}
    by_hash: dict[str, list[Checkpoint]] = defaultdict(list)
    for checkpoint in Checkpoint.objects.select_related("agent").order_by("created_at"):
        by_hash[checkpoint.weights_sha256].append(checkpoint)
    nominated = set(Nomination.objects.values_list("checkpoint_id", flat=True))
    for sha, checkpoints in by_hash.items():
        owner = checkpoints[0]
        for checkpoint in checkpoints:
            if checkpoint.agent_id == owner.agent_id or checkpoint.agent_id not in audited_ids:
                continue
            run.record(
                agent=checkpoint.agent,
                kind=Finding.Kind.FOREIGN_ARTIFACT,
                severity="critical" if checkpoint.pk in nominated else "high",
                summary=f"checkpoint {checkpoint.pk} has the same weights as {owner.agent.name}'s "
                f"checkpoint {owner.pk}, registered earlier",
                evidence={
                    "weights_sha256": sha,
                    "checkpoint": checkpoint.pk,
                    "path": checkpoint.path,
                    "nominated": checkpoint.pk in nominated,
                    "owner": {
                        "agent": owner.agent.name,
                        "checkpoint": owner.pk,
                        "path": owner.path,
                        "registered_at": owner.created_at.isoformat(),
                    },
                },
                key=f"weights\0{sha}\0{checkpoint.pk}",
            )


def _audit_substitution(
    run: _Run, nomination: Nomination, references: dict[int, _References]
) -> None:
    reference = references.get(nomination.phase.competition_id)
    checkpoint = nomination.checkpoint
    if reference is None:
        return
    base_fields = {
        "agent": nomination.agent,
        "kind": Finding.Kind.MODEL_SUBSTITUTION,
        "phase": nomination.phase,
    }
    # What the arena serves: the platform's copy, once the phase froze (agents/nominees.py);
    # before that, the checkpoint as registered. Never the sandbox's files as they are now.
    copy = NomineeCopy.objects.filter(nomination=nomination).exclude(folder="").first()
    weights_sha256 = copy.weights_sha256 if copy else checkpoint.weights_sha256
    where = {"checkpoint": checkpoint.pk, "path": copy.folder if copy else checkpoint.path}
    if reference.instruct_sha and weights_sha256 == reference.instruct_sha:
        run.record(
            **base_fields,
            severity="critical",
            summary=f"the nominated checkpoint {checkpoint.pk} is the instruct reference, "
            "byte for byte",
            evidence={
                **where,
                "weights_sha256": weights_sha256,
                "reference": str(reference.instruct),
            },
            key=f"hash\0instruct\0{weights_sha256}",
        )
        return
    if reference.base_sha and weights_sha256 == reference.base_sha:
        run.record(
            **base_fields,
            severity="info",
            summary=f"the nominated checkpoint {checkpoint.pk} is the base model, unchanged",
            evidence={
                **where,
                "weights_sha256": weights_sha256,
                "reference": str(reference.base),
            },
            key=f"hash\0base\0{weights_sha256}",
        )
        return
    folder = (
        SandboxPath(Path(copy.folder)) if copy else _agent_path(nomination.agent, checkpoint.path)
    )
    try:
        is_folder = stat.S_ISDIR(folder.stat().st_mode)
    except OSError:  # gone, or behind a link
        is_folder = False
    if reference.instruct is None or not is_folder:
        return
    try:
        distance = artifacts.parameter_distance(folder, reference.instruct, base=reference.base)
    except (OSError, ValueError, RuntimeError) as exc:
        run.report.errors.append(f"checkpoint {checkpoint.pk}: distance not measured ({exc})")
        return
    gap = "n/a" if distance.gap_ratio is None else f"{distance.gap_ratio:.3g}"
    run.log(
        f"  distance to the instruct reference: relative L2 {distance.relative_l2:.3g}, "
        f"gap ratio {gap}"
    )
    if distance.too_close:
        run.record(
            **base_fields,
            severity="high",
            summary=f"the nominated checkpoint {checkpoint.pk} is within "
            f"{distance.gap_ratio if distance.gap_ratio is not None else distance.relative_l2:.2g} "
            f"{'base→instruct gaps' if distance.gap_ratio is not None else '(relative L2)'} "
            "of the instruct reference",
            evidence={**where, "reference": str(reference.instruct), **distance.evidence()},
            key=f"distance\0instruct\0{weights_sha256}",
        )


# --- model cards -----------------------------------------------------------------------------


def _lineage(checkpoint: Checkpoint) -> list[Checkpoint]:
    chain, seen = [], set()
    current: Checkpoint | None = checkpoint
    while current is not None and current.pk not in seen:
        seen.add(current.pk)
        chain.append(current)
        current = current.parent
    return chain


def _trainer_steps(checkpoint: Checkpoint) -> int | None:
    state = _agent_path(checkpoint.agent, checkpoint.path) / "trainer_state.json"
    try:
        step = json.loads(read_bytes(state, max_bytes=files.MAX_JSON_PARSE_BYTES)).get(
            "global_step"
        )
    except (OSError, ValueError, AttributeError):  # a link, a FIFO, too large, not JSON
        return None
    return step if isinstance(step, int) else None


def run_log_for(nomination: Nomination) -> cards.RunLog:
    """What the platform recorded about the nominated checkpoint and the agent's phase."""
    chain = _lineage(nomination.checkpoint)
    jobs = {c.job_id: c.job for c in chain}
    lineage_seconds = sum(job.gpu_seconds_charged for job in jobs.values())
    account = jobs[nomination.checkpoint.job_id].account
    account_seconds = gpu_seconds_charged(account, period=nomination.phase.label)
    if not account_seconds:  # usage booked under another period name: every job of the phase
        account_seconds = int(
            account.jobs.filter(period=nomination.phase.label).aggregate(
                total=Sum("gpu_seconds_charged")
            )["total"]
            or 0
        )
    records = DataRecord.objects.filter(checkpoints__in=[c.pk for c in chain]).distinct()
    sources = sorted({str(s) for record in records for s in record.sources})
    steps = [_trainer_steps(c) for c in chain]
    own = steps[0]
    agent_sources = {
        str(source)
        for sources in DataRecord.objects.filter(agent=nomination.agent).values_list(
            "sources", flat=True
        )
        if isinstance(sources, list)
        for source in sources
    }
    return cards.RunLog(
        lineage_gpu_hours=lineage_seconds / 3600,
        account_gpu_hours=account_seconds / 3600,
        job_gpus=frozenset(job.gpus for job in jobs.values() if job.gpus),
        data_sources=tuple(sources),
        data_records=records.count(),
        own_steps=own,
        lineage_steps=sum(s for s in steps if s) if own is not None else None,
        trajectory_datasets=tuple(_trajectory_datasets(nomination)),
        agent_data_sources=tuple(sorted(agent_sources)),
    )


def _trajectory_datasets(nomination: Nomination) -> list[trajectory_data.SeenDataset]:
    """Hub data sets the agent's recorded trajectory shows it fetching during the phase (from
    its start to its end, or now while it runs): the platform's store, never a sandbox file."""
    phase = nomination.phase
    events = trajectory_events(
        nomination.agent,
        since=phase.starts_at,
        until=phase.ends_at,
        kinds=[TrajectoryEvent.Kind.TOOL_CALL, TrajectoryEvent.Kind.API_CALL],
    )
    return trajectory_data.datasets_in_events(
        (event.pk, event.kind, event.payload) for event in events
    )


def _audit_model_card(run: _Run, nomination: Nomination) -> None:
    log = run_log_for(nomination)
    for found in cards.card_discrepancies(nomination.card_fields or {}, log):
        run.record(
            agent=nomination.agent,
            kind=Finding.Kind.MODEL_CARD,
            severity=found.severity,
            phase=nomination.phase,
            summary=found.summary,
            evidence={
                "nomination": nomination.pk,
                "checkpoint": nomination.checkpoint_id,
                "field": found.field,
                "claimed": found.claimed,
                "recorded": found.recorded,
                "run_log": log.evidence(),
                "tolerance_factor": cards.FACTOR,
            },
            key=f"card\0{nomination.pk}\0{nomination.checkpoint_id}\0{found.rule}\0"
            f"{json.dumps(found.claimed, sort_keys=True)}",
        )


# --- the trajectory judge --------------------------------------------------------------------


def _audit_trajectory(run: _Run, agent: Agent, judge: TrajectoryJudge) -> None:
    """Judge the trajectory the platform recorded (`agents.trajectory`), never a file in the
    sandbox: the agent can edit its files, not the store. Excerpts are numbered by position in
    the agent's trajectory; the store is append-only, so every excerpt but the last is the
    same on each run and the judge's cache (`JudgeReview`) holds."""
    ids: list[int] = []

    def lines() -> Iterator[str]:
        for event_id, line in trajectory_lines(agent):
            ids.append(event_id)
            yield line

    dropped = trajectory_dropped(agent)
    if dropped:
        run.report.skipped.append(
            f"{agent.name}: {dropped} trajectory event(s) dropped past the daily bounds"
        )
    pieces = excerpts(lines(), max_chars=JUDGE_EXCERPT_CHARS)
    for first, last, text in pieces:
        digest = hashlib.sha256(text.encode()).hexdigest()
        review = JudgeReview.objects.filter(agent=agent, judge=judge.name, digest=digest).first()
        if review is None:
            try:
                verdict = judge.judge(agent=agent.name, excerpt=text)
            except JudgeError as exc:
                run.report.errors.append(f"{agent.name}: judge on lines {first}-{last}: {exc}")
                continue
            review, _ = JudgeReview.objects.get_or_create(
                agent=agent,
                judge=judge.name,
                digest=digest,
                defaults={
                    "violation": verdict.violation,
                    "verdict": {
                        "rule": verdict.rule,
                        "severity": verdict.severity,
                        "summary": verdict.summary,
                        "quotes": verdict.quotes,
                        "raw": verdict.raw,
                    },
                },
            )
        if review.violation:
            run.record(
                agent=agent,
                kind=Finding.Kind.JUDGE,
                severity=review.verdict["severity"],
                summary=review.verdict["summary"] or f"the judge flagged lines {first}-{last}",
                evidence={
                    "trajectory": "recorded by the platform",
                    "lines": [first, last],
                    "events": [ids[first - 1], ids[last - 1]],
                    "judge": judge.name,
                    "rule": review.verdict["rule"],
                    "quotes": review.verdict["quotes"],
                },
                key=f"judge\0{judge.name}\0{digest}",
            )


def judge_from_settings(
    *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
) -> ChatCompletionsJudge | None:
    """The judge: `model` (default `SAFETY_JUDGE_MODEL`) at `base_url` (default
    `SAFETY_JUDGE_BASE_URL`, else the site's own API proxy) with `api_key` (default
    `SAFETY_JUDGE_API_KEY`, an organizer proxy token); None when no model is configured."""
    model = model or getattr(settings, "SAFETY_JUDGE_MODEL", "")
    if not model:
        return None
    proxy = f"{settings.AGENTS_ARENA_URL.rstrip('/')}/proxy/v1"
    return ChatCompletionsJudge(
        base_url=base_url or getattr(settings, "SAFETY_JUDGE_BASE_URL", "") or proxy,
        api_key=api_key or getattr(settings, "SAFETY_JUDGE_API_KEY", "") or "",
        model=model,
    )
