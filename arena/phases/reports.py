"""Daily per-agent reports for organizers: what each agent did on one day, in HTML and Markdown.

A report reads the ledgers and records as they stood at the end of the day (in the site's
time zone): jobs that ran or were submitted that day with their GPU-hours, GPU-hours used and
left in the account's budget period, LLM API spend from the proxy's call log, the data,
checkpoints and nominations registered that day, the day's experiment-journal entries, and the
agent's strategy lock-in in the phase the day falls in, as of the day's end, and what its
recorded trajectory holds for the day (model, tool and API calls, the scaffold's own spend,
events dropped, the first and last tool commands). The index adds the
study's analyses of every competition with evaluation results, as they stand when the reports
are written. It writes nothing to the database.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.utils import timezone

from agents.journal import journal_of_day
from agents.models import Agent
from agents.selectors import (
    agents_in_order,
    api_spent_before,
    api_usage_between,
    checkpoints_between,
    data_records_between,
    nominations_touched_between,
)
from agents.strategy_selectors import PhaseLockIn, phase_lock_in
from agents.trajectory_selectors import TrajectoryOfDay, trajectory_of_day
from arena.battles.answer_markdown import document_html
from arena.competition.selectors import phase_overlapping
from cluster.models import ClusterAccount
from cluster.selectors import (
    gpu_seconds_used_by,
    job_segments_overlapping,
    jobs_touching,
)
from evalsuite.analyses import correlations_report
from evalsuite.report_text import CORRELATION_COLUMNS, correlation_note, correlation_rows
from evalsuite.selectors import competitions_with_eval_results


@dataclass(frozen=True)
class JobOfDay:
    scheduler_id: str
    name: str
    state: str
    qos: str
    gpus: int
    submitted_at: dt.datetime
    gpu_hours_day: float  # GPU-hours of its runs that fall on this day
    gpu_hours_charged: float  # charged to the job in all, so far


@dataclass(frozen=True)
class DataLine:
    path: str
    rows: int
    tokens: int
    sources: str
    licence: str
    reason: str


@dataclass(frozen=True)
class CheckpointLine:
    path: str
    job: str
    parent: str
    parameters: int


@dataclass(frozen=True)
class NominationLine:
    phase: str
    checkpoint: str
    training_method: str  # as the model card claims
    claimed_gpu_hours: str
    updated_at: dt.datetime


@dataclass(frozen=True)
class JournalLine:
    written_at: dt.datetime
    kind: str
    text: str  # the agent's, whole: escaped when shown


@dataclass(frozen=True)
class AgentDay:
    agent: str
    active: bool
    day: dt.date
    period: str
    jobs: list[JobOfDay]
    gpu_hours_day: float
    gpu_hours_used: float  # in the period, by the end of the day
    gpu_hours_limit: float
    api_calls: int
    api_tokens: int
    api_spend_day: Decimal
    api_spent_total: Decimal  # by the end of the day
    api_credit_limit: Decimal
    data: list[DataLine]
    checkpoints: list[CheckpointLine]
    nominations: list[NominationLine]
    journal: list[JournalLine] = field(default_factory=list)
    lock_in: PhaseLockIn | None = None  # in the phase the day falls in, as of its end
    trajectory: TrajectoryOfDay | None = None

    @property
    def gpu_hours_left(self) -> float:
        return max(0.0, self.gpu_hours_limit - self.gpu_hours_used)

    @property
    def api_credit_left(self) -> Decimal:
        return max(Decimal(0), self.api_credit_limit - self.api_spent_total)


def parse_day(text: str) -> dt.date:
    """A YYYY-MM-DD date, or ValueError with a message a person can act on."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date in the form YYYY-MM-DD (e.g. 2025-03-14)"
        ) from None


def day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    zone = timezone.get_current_timezone()
    start = timezone.make_aware(dt.datetime.combine(day, dt.time.min), zone)
    return start, timezone.make_aware(
        dt.datetime.combine(day + dt.timedelta(days=1), dt.time.min), zone
    )


def agent_day(agent: Agent, day: dt.date) -> AgentDay:
    start, end = day_bounds(day)
    account = agent.cluster_account
    jobs = _jobs_of_day(account, start, end) if account else []
    used_seconds = gpu_seconds_used_by(account, end=end) if account else 0
    # The agent's API credit only: its scaffold's calls are billed apart (the trajectory part).
    today = api_usage_between(agent, start=start, end=end)
    return AgentDay(
        agent=agent.name,
        active=agent.active,
        day=day,
        period=account.period if account else "",
        jobs=jobs,
        gpu_hours_day=sum(j.gpu_hours_day for j in jobs),
        gpu_hours_used=used_seconds / 3600,
        gpu_hours_limit=float(account.gpu_hours_limit) if account else 0.0,
        api_calls=today.calls,
        api_tokens=today.tokens,
        api_spend_day=today.cost_usd,
        api_spent_total=api_spent_before(agent, end=end),
        api_credit_limit=agent.credit_limit,
        data=[
            DataLine(
                path=r.path,
                rows=r.rows,
                tokens=r.tokens,
                sources=", ".join(str(s) for s in r.sources)
                if isinstance(r.sources, list)
                else str(r.sources),
                licence=r.licence,
                reason=r.reason,
            )
            for r in data_records_between(agent, start=start, end=end)
        ],
        checkpoints=[
            CheckpointLine(
                path=c.path,
                job=c.job.scheduler_id,
                parent=c.parent.path if c.parent else "",
                parameters=c.parameters,
            )
            for c in checkpoints_between(agent, start=start, end=end)
        ],
        nominations=[
            NominationLine(
                phase=n.phase.label,
                checkpoint=n.checkpoint.path,
                training_method=str((n.card_fields or {}).get("training_method", "")),
                claimed_gpu_hours=str((n.card_fields or {}).get("gpu_hours", "")),
                updated_at=n.updated_at,
            )
            for n in nominations_touched_between(agent, start=start, end=end)
        ],
        journal=[
            JournalLine(written_at=timezone.localtime(e.created_at), kind=e.kind, text=e.text)
            for e in journal_of_day(agent, start, end)
        ],
        lock_in=_lock_in_of_day(agent, start, end),
        trajectory=trajectory_of_day(agent, start, end),
    )


def _lock_in_of_day(agent: Agent, start: dt.datetime, end: dt.datetime) -> PhaseLockIn | None:
    phase = phase_overlapping(start, end)
    return (
        None
        if phase is None or agent.cluster_account_id is None
        else phase_lock_in(agent, phase, until=end)
    )


def _jobs_of_day(account: ClusterAccount, start: dt.datetime, end: dt.datetime) -> list[JobOfDay]:
    """Jobs submitted that day, or whose runs overlap it, or that were running through it."""
    seconds_by_job: dict[int, float] = {}
    for segment in job_segments_overlapping(account, start=start, end=end):
        overlap = min(segment.ended_at, end) - max(segment.started_at, start)
        share = overlap.total_seconds() / max(
            1.0, (segment.ended_at - segment.started_at).total_seconds()
        )
        # A segment's charge is spread evenly over its span; a day gets its share of it.
        seconds_by_job[segment.job_id] = (
            seconds_by_job.get(segment.job_id, 0.0)
            + min(1.0, max(0.0, share)) * segment.gpu_seconds
        )
    return [
        JobOfDay(
            scheduler_id=job.scheduler_id,
            name=job.name,
            state=job.state,
            qos=job.qos,
            gpus=job.gpus,
            submitted_at=job.submitted_at,
            gpu_hours_day=seconds_by_job.get(job.pk, 0.0) / 3600,
            gpu_hours_charged=job.gpu_seconds_charged / 3600,
        )
        for job in jobs_touching(account, start=start, end=end)
    ]


def daily_reports(*, day: dt.date) -> list[AgentDay]:
    return [agent_day(agent, day) for agent in agents_in_order()]


@dataclass(frozen=True)
class Analyses:
    """One competition's correlations (Spearman ρ) as table rows (`CORRELATION_COLUMNS`)."""

    competition: str
    rows: list[list[str]]
    note: str


def competition_analyses() -> list[Analyses]:
    """The analyses of every competition with evaluation results, newest competition first."""
    out = []
    for competition in competitions_with_eval_results():
        report = correlations_report(competition)
        out.append(Analyses(competition.name, correlation_rows(report), correlation_note(report)))
    return out


# -- rendering -------------------------------------------------------------------------------
# Each report is written once, in Markdown; its HTML is that Markdown through the arena's one
# safe renderer (`document_html`: raw HTML off, then an allow-list), so the two cannot disagree
# and agent text (journal entries, job names, tool commands) never becomes markup.

# Inline Markdown that text could start: escaped, so the text shows as written. Raw HTML is off,
# so a `<` needs escaping only where it opens an autolink (`<https://…>`, `<a@b.c>`); `~` strikes
# through only when doubled; a `[` makes a link or an image only when its `]` is followed by `(`
# (the reports define no reference links).
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|*_`&"})
_AUTOLINK_OPEN = re.compile(
    r"<(?=[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\x00-\x20]*>|[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[^<>\s]*>)"
)


def _md_text(value: object) -> str:
    """`value` as one line of literal Markdown text: a newline folds to a space."""
    text = " ".join(str(value).translate(_MD_SPECIAL).splitlines())
    text = _AUTOLINK_OPEN.sub(r"\\<", text).replace("~~", "\\~\\~")
    return text.replace("](", "]\\(")


@dataclass(frozen=True)
class _ReportLink:
    """A table cell that is a link to an agent's report, not text to escape."""

    agent: str
    suffix: str

    def markdown(self) -> str:
        # An agent's name is a slug (letters, digits, `-`, `_`), but the link is built so that
        # any name stays one link: the text escaped, the target percent-encoded.
        return f"[{_md_text(self.agent)}]({quote(self.agent)}{self.suffix})"


def _md_cell(value: object) -> str:
    return value.markdown() if isinstance(value, _ReportLink) else _md_text(value)


def _md_table(headers: list[str], rows: Sequence[Sequence[object]]) -> list[str]:
    if not rows:
        return ["_none_", ""]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _md_fenced(text: str) -> list[str]:
    """`text` whole, its newlines kept, as a fenced block: the fence is longer than any run of
    backticks in the text, so no line of it can close the block early."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *text.splitlines(), fence, ""]


def report_markdown(report: AgentDay, *, link_suffix: str = ".md") -> str:
    """The day's report; its links to other reports end in `link_suffix` (".html" when the
    Markdown is made the HTML file)."""
    r = report
    lines = [
        f"# {_md_text(r.agent)} — {r.day.isoformat()}",
        "",
        f"Budget period: {_md_text(r.period) or '(none)'}"
        + ("" if r.active else " · deprovisioned"),
        "",
        "## GPU",
        "",
        f"- GPU-hours this day: {r.gpu_hours_day:.2f}",
        f"- GPU-hours used in the period (end of day): {r.gpu_hours_used:.2f} of "
        f"{r.gpu_hours_limit:.2f}; left {r.gpu_hours_left:.2f}",
        "",
        "## Jobs",
        "",
        *_md_table(
            ["job", "name", "state", "QOS", "GPUs", "GPU-h this day", "GPU-h charged"],
            [
                [
                    j.scheduler_id,
                    j.name,
                    j.state,
                    j.qos,
                    j.gpus,
                    f"{j.gpu_hours_day:.2f}",
                    f"{j.gpu_hours_charged:.2f}",
                ]
                for j in r.jobs
            ],
        ),  # fmt: skip
        "## LLM API",
        "",
        f"- calls this day: {r.api_calls} ({r.api_tokens:,} tokens)",
        f"- spend this day: ${r.api_spend_day:.2f}",
        f"- spent in all (end of day): ${r.api_spent_total:.2f} of ${r.api_credit_limit:.2f}; "
        f"left ${r.api_credit_left:.2f}",
        "",
        "## Data registered",
        "",
        *_md_table(
            ["path", "rows", "tokens", "sources", "licence", "reason"],
            [[d.path, d.rows, d.tokens, d.sources, d.licence, d.reason] for d in r.data],
        ),
        "## Checkpoints",
        "",
        *_md_table(
            ["path", "job", "parent", "parameters"],
            [[c.path, c.job, c.parent or "—", f"{c.parameters:,}"] for c in r.checkpoints],
        ),
        "## Nominations",
        "",
        *_md_table(
            ["phase", "checkpoint", "training (card)", "GPU-h (card)", "updated"],
            [
                [
                    n.phase,
                    n.checkpoint,
                    n.training_method or "—",
                    n.claimed_gpu_hours or "—",
                    f"{n.updated_at:%Y-%m-%d %H:%M}",
                ]
                for n in r.nominations
            ],  # fmt: skip
        ),
        "## Experiment journal",
        "",
        *_journal_markdown(r.journal),
        "## Strategy lock-in",
        "",
        *_lock_in_markdown(r.lock_in),
        "## Trajectory",
        "",
        *_trajectory_markdown(r.trajectory),
        f"[all agents](index{link_suffix})",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _journal_markdown(journal: list[JournalLine]) -> list[str]:
    """One row an entry, folded to a line; an entry of several lines follows whole, since a
    table cell cannot hold a line break."""
    lines = _md_table(
        ["written", "kind", "entry"], [[f"{e.written_at:%H:%M}", e.kind, e.text] for e in journal]
    )
    for e in journal:
        if len(e.text.splitlines()) > 1:
            lines += [f"{e.written_at:%H:%M}, {_md_text(e.kind)}, as written:", ""]
            lines += _md_fenced(e.text)
    return lines


def _dropped_by_budget(dropped: dict[str, int]) -> str:
    names = {"model": "model calls", "tool": "tool calls the platform ran",
             "api": "API call records", "reported": "the agent's reports"}  # fmt: skip
    return ", ".join(f"{names.get(b, b)}: {n}" for b, n in dropped.items() if n)


def _trajectory_markdown(t: TrajectoryOfDay | None) -> list[str]:
    if t is None:
        return ["_not read_", ""]

    lines = [
        f"- model calls: {t.model_calls} · tool calls (reported by the agent): {t.tool_calls} · "
        f"API calls: {t.api_calls}",
        f"- scaffold's own model calls: {t.scaffold_calls}, ${t.scaffold_spend:.2f} this day",
        f"- events dropped past the day's bounds: {t.dropped}"
        + (f" ({_dropped_by_budget(t.dropped_by_budget)})" if t.dropped else ""),
        "",
    ]
    for title, commands in t.command_tables:
        rows = [
            [f"{timezone.localtime(c.at):%H:%M:%S}", c.tool, c.command,
             "—" if c.exit_code is None else c.exit_code]
            for c in commands
        ]  # fmt: skip
        lines += [f"### {title}", "", *_md_table(["time", "tool", "command", "exit"], rows)]
    return lines


def _lock_in_markdown(line: PhaseLockIn | None) -> list[str]:
    if line is None:
        return ["_no phase on this day_", ""]
    m = line.measure
    phase = _md_text(line.phase)
    if not m.approaches:
        return [f"- {phase}: no approach tried yet", ""]
    return [
        f"- {phase}: {m.approaches} distinct approaches in {m.attempts} attempts",
        f"- last new approach: {timezone.localtime(m.locked_in_at):%Y-%m-%d %H:%M}, "
        f"{m.share_elapsed:.0%} of the phase elapsed",
        f"- approaches, in the order tried: {_md_text(', '.join(m.approach_names))}",
        "",
    ]


def index_markdown(
    day: dt.date,
    reports: list[AgentDay],
    analyses: list[Analyses] | None = None,
    *,
    link_suffix: str = ".md",
) -> str:
    lines = [f"# Daily reports — {day.isoformat()}", ""]
    lines += _md_table(
        ["agent", "jobs", "GPU-h this day", "GPU-h left", "API spend this day", "API credit left",
         "data", "checkpoints", "nominations", "journal", "approaches", "report"],
        [
            [r.agent, len(r.jobs), f"{r.gpu_hours_day:.2f}", f"{r.gpu_hours_left:.2f}",
             f"${r.api_spend_day:.2f}", f"${r.api_credit_left:.2f}", len(r.data),
             len(r.checkpoints), len(r.nominations), len(r.journal),
             r.lock_in.measure.approaches if r.lock_in else "—", _ReportLink(r.agent, link_suffix)]
            for r in reports
        ],
    )  # fmt: skip
    for a in analyses or []:
        lines += [f"## Analyses, {_md_text(a.competition)} (Spearman ρ)", ""]
        lines += _md_table(CORRELATION_COLUMNS, a.rows)  # type: ignore[arg-type]
        lines += [_md_text(a.note), ""]
    return "\n".join(lines).rstrip() + "\n"


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}
table{{border-collapse:collapse;width:100%}}th,td{{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}}
pre{{white-space:pre-wrap}}</style></head>
<body>
{body}</body></html>
"""


def markdown_page(title: str, markdown: str) -> str:
    """A standalone HTML page of `markdown`, through the arena's one safe renderer. A table
    row's cells are put on one line, as a person writing the page would."""
    body = (
        document_html(markdown).replace("</td>\n<td", "</td><td").replace("</th>\n<th", "</th><th")
    )
    return _PAGE.format(title=html.escape(title), body=body)


def report_html(report: AgentDay) -> str:
    return markdown_page(
        f"{report.agent} — {report.day.isoformat()}", report_markdown(report, link_suffix=".html")
    )


def default_out_dir(day: dt.date) -> Path:
    return Path(settings.VAR_DIR) / "reports" / day.isoformat()


def reports_write(
    *,
    day: dt.date,
    out_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write `<agent>.html` and `<agent>.md` for every agent, and `index.html`/`index.md`."""
    out = out_dir or default_out_dir(day)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    written: list[Path] = []
    agents = agents_in_order()
    for number, agent in enumerate(agents, start=1):
        report = agent_day(agent, day)
        reports.append(report)
        for suffix, text in ((".md", report_markdown(report)), (".html", report_html(report))):
            path = out / f"{agent.name}{suffix}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
        if progress is not None:
            progress(
                f"[{number}/{len(agents)}] {agent.name}: {len(report.jobs)} jobs, "
                f"{report.gpu_hours_day:.2f} GPU-h, ${report.api_spend_day:.2f} API"
            )
    analyses = competition_analyses()
    index_html = markdown_page(
        f"Daily reports — {day.isoformat()}",
        index_markdown(day, reports, analyses, link_suffix=".html"),
    )
    for name, text in (("index.md", index_markdown(day, reports, analyses)),
                       ("index.html", index_html)):  # fmt: skip
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written
