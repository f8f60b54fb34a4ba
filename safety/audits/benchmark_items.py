"""Evaluation items where an agent keeps them: benchmark text in its data files
(contamination) and benchmark answers in its code and its checkpoints' chat templates and
generation configs (hard-coded outputs)."""

from __future__ import annotations

import json
from collections.abc import Callable

from agents.models import Agent, Checkpoint, Nomination
from arena.competition.models import Phase
from cluster.sandbox_files import SandboxPath, read_text
from safety import contamination, files, hardcoded
from safety.audits.agent_files import AgentFiles, agent_files, agent_path
from safety.audits.recording import MAX_EVIDENCE_MATCHES, AuditRun
from safety.budget import BudgetSpent
from safety.models import Finding
from safety.ngrams import ItemIndex

CHECKPOINT_TEXT_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json")


def audit_files(run: AuditRun, agent: Agent, text_index: ItemIndex, code_index: ItemIndex) -> None:
    """Every data and code file of the agent, within the agent's budget for this run: once it
    is spent, what was not read is noted (`AuditRun.left_unread`) and the audit moves on."""
    with run.spending(agent) as budget:
        _read_files(run, agent, agent_files(agent, budget), text_index, code_index)


def _read_files(
    run: AuditRun,
    agent: Agent,
    found: AgentFiles,
    text_index: ItemIndex,
    code_index: ItemIndex,
) -> None:
    budget = run.budget(agent)
    try:
        for path in found:
            if files.is_data_file(path):
                scan = contamination.scan_file(text_index, path, budget)  # type: ignore[arg-type]  # SandboxPath is a Path at run time
                if scan.skipped:
                    run.report.skipped.append(f"{path}: {scan.skipped}")
                run.report.files_scanned += 1
                run.report.records_scanned += scan.records
                budget.files_read += 1
                if scan.matches:
                    hub_files = files.hub_snapshot_names(path)
                    _record_contamination(run, agent, scan, hub_files=hub_files)
                if scan.budget_spent:
                    budget.at = path
                    raise BudgetSpent(scan.skipped)
            elif files.is_code_file(path):
                try:
                    text = files.read_code(path)
                except OSError as refused:  # over the size bound, or changed into a link
                    run.report.skipped.append(f"{path}: {refused}")
                    continue
                budget.read(len(text))
                run.report.files_scanned += 1
                budget.files_read += 1
                found_here = list(hardcoded.find_hardcoded(code_index, source=str(path), text=text))
                if found_here:
                    _record_hardcoded(run, agent, str(path), found_here, phase=None)
    except BudgetSpent:
        run.left_unread(agent, during="the contamination scan", unread=found.left_unread())


def _record_contamination(
    run: AuditRun, agent: Agent, scan: contamination.FileScan, *, hub_files: list[str]
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
    run: AuditRun,
    agent: Agent,
    source: str,
    found: list[hardcoded.Hardcoded],
    *,
    phase: Phase | None,
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


def audit_checkpoint_texts(
    run: AuditRun, agent: Agent, code_index: ItemIndex, nominations: list[Nomination]
) -> None:
    """The chat template and generation config of every checkpoint the agent registered."""
    phase_of = {n.checkpoint_id: n.phase for n in nominations}
    for checkpoint in Checkpoint.objects.filter(agent=agent):
        folder = agent_path(agent, checkpoint.path)
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
