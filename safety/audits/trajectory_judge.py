"""An LLM judge over the trajectory the platform recorded, in excerpts cached by digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from agents.models import Agent
from agents.trajectory import trajectory_dropped, trajectory_lines
from safety.audits.recording import AuditRun
from safety.judge import JudgeError, TrajectoryJudge, excerpts
from safety.models import Finding, JudgeReview

JUDGE_EXCERPT_CHARS = 24_000


def audit_trajectory(run: AuditRun, agent: Agent, judge: TrajectoryJudge) -> None:
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
