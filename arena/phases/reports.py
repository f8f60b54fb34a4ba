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
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.template import Context, Engine
from django.utils import timezone

from agents.journal import journal_of_day
from agents.models import Agent, Checkpoint, DataRecord, Nomination, ProxyCall
from agents.strategy_selectors import PhaseLockIn, phase_lock_in
from agents.trajectory_selectors import TrajectoryOfDay, trajectory_of_day
from arena.competition.models import Competition, Phase
from cluster.models import ClusterAccount, Job, JobSegment
from evalsuite.analyses import correlations_report
from evalsuite.report_text import CORRELATION_COLUMNS, correlation_note, correlation_rows


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
    jobs: list[JobOfDay] = []
    used_seconds = 0
    if account is not None:
        jobs = _jobs_of_day(account, start, end)
        used_seconds = (
            JobSegment.objects.filter(
                job__account=account, job__period=account.period, ended_at__lt=end
            ).aggregate(total=Sum(F("gpus") * F("elapsed_seconds")))["total"]
            or 0
        )
    # The agent's API credit only: its scaffold's calls are billed apart (the trajectory part).
    calls = ProxyCall.objects.filter(agent=agent, budget=ProxyCall.Budget.API)
    today = calls.filter(created_at__gte=start, created_at__lt=end).aggregate(
        n=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cost=Sum("cost_usd"),
    )
    spent_total = calls.filter(created_at__lt=end).aggregate(cost=Sum("cost_usd"))["cost"]
    return AgentDay(
        agent=agent.name,
        active=agent.active,
        day=day,
        period=account.period if account else "",
        jobs=jobs,
        gpu_hours_day=sum(j.gpu_hours_day for j in jobs),
        gpu_hours_used=used_seconds / 3600,
        gpu_hours_limit=float(account.gpu_hours_limit) if account else 0.0,
        api_calls=today["n"] or 0,
        api_tokens=(today["prompt"] or 0) + (today["completion"] or 0),
        api_spend_day=today["cost"] or Decimal(0),
        api_spent_total=spent_total or Decimal(0),
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
            for r in DataRecord.objects.filter(
                agent=agent, created_at__gte=start, created_at__lt=end
            )
        ],
        checkpoints=[
            CheckpointLine(
                path=c.path,
                job=c.job.scheduler_id,
                parent=c.parent.path if c.parent else "",
                parameters=c.parameters,
            )
            for c in Checkpoint.objects.filter(
                agent=agent, created_at__gte=start, created_at__lt=end
            ).select_related("job", "parent")
        ],
        nominations=[
            NominationLine(
                phase=n.phase.label,
                checkpoint=n.checkpoint.path,
                training_method=str((n.card_fields or {}).get("training_method", "")),
                claimed_gpu_hours=str((n.card_fields or {}).get("gpu_hours", "")),
                updated_at=n.updated_at,
            )
            for n in Nomination.objects.filter(agent=agent)
            .filter(
                Q(created_at__gte=start, created_at__lt=end)
                | Q(updated_at__gte=start, updated_at__lt=end)
            )
            .select_related("phase", "checkpoint")
        ],
        journal=[
            JournalLine(written_at=timezone.localtime(e.created_at), kind=e.kind, text=e.text)
            for e in journal_of_day(agent, start, end)
        ],
        lock_in=_lock_in_of_day(agent, start, end),
        trajectory=trajectory_of_day(agent, start, end),
    )


def _lock_in_of_day(agent: Agent, start: dt.datetime, end: dt.datetime) -> PhaseLockIn | None:
    phase = (
        Phase.objects.filter(starts_at__lt=end, ends_at__gt=start).order_by("-starts_at").first()
    )
    return (
        None
        if phase is None or agent.cluster_account_id is None
        else phase_lock_in(agent, phase, until=end)
    )


def _jobs_of_day(account: ClusterAccount, start: dt.datetime, end: dt.datetime) -> list[JobOfDay]:
    """Jobs submitted that day, or whose runs overlap it, or that were running through it."""
    segments = JobSegment.objects.filter(
        job__account=account, started_at__lt=end, ended_at__gt=start
    )
    jobs = (
        Job.objects.filter(account=account)
        .filter(
            Q(submitted_at__gte=start, submitted_at__lt=end)
            | Q(pk__in=segments.values("job_id"))
            | Q(started_at__lt=end, ended_at__isnull=True, state=Job.State.RUNNING)
            | Q(started_at__lt=end, ended_at__gt=start)
        )
        .order_by("submitted_at")
    )
    seconds_by_job: dict[int, float] = {}
    for segment in segments:
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
        for job in jobs
    ]


def daily_reports(*, day: dt.date) -> list[AgentDay]:
    return [agent_day(agent, day) for agent in Agent.objects.order_by("name")]


@dataclass(frozen=True)
class Analyses:
    """One competition's correlations (Spearman ρ) as table rows (`CORRELATION_COLUMNS`)."""

    competition: str
    rows: list[list[str]]
    note: str


def competition_analyses() -> list[Analyses]:
    """The analyses of every competition with evaluation results, newest competition first."""
    out = []
    competitions = Competition.objects.filter(phases__eval_runs__isnull=False).distinct()
    for competition in competitions.order_by("-created_at"):
        report = correlations_report(competition)
        out.append(Analyses(competition.name, correlation_rows(report), correlation_note(report)))
    return out


# -- rendering -------------------------------------------------------------------------------


def _md_cell(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list[object]]) -> list[str]:
    if not rows:
        return ["_none_", ""]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def report_markdown(report: AgentDay) -> str:
    r = report
    lines = [
        f"# {r.agent} — {r.day.isoformat()}",
        "",
        f"Budget period: {r.period or '(none)'}" + ("" if r.active else " · deprovisioned"),
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
        *_md_table(
            ["written", "kind", "entry"],
            [[f"{e.written_at:%H:%M}", e.kind, e.text] for e in r.journal],
        ),
        "## Strategy lock-in",
        "",
        *_lock_in_markdown(r.lock_in),
        "## Trajectory",
        "",
        *_trajectory_markdown(r.trajectory),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _trajectory_markdown(t: TrajectoryOfDay | None) -> list[str]:
    if t is None:
        return ["_not read_", ""]

    lines = [
        f"- model calls: {t.model_calls} · tool calls (reported by the agent): {t.tool_calls} · "
        f"API calls: {t.api_calls}",
        f"- scaffold's own model calls: {t.scaffold_calls}, ${t.scaffold_spend:.2f} this day",
        f"- events dropped past the day's bounds: {t.dropped}",
        "",
    ]
    for title, commands in t.command_tables:
        rows = [
            [f"{timezone.localtime(c.at):%H:%M:%S}", c.tool, c.command,
             "—" if c.exit_code is None else c.exit_code]
            for c in commands
        ]  # fmt: skip
        lines += [f"{title}:", "", *_md_table(["time", "tool", "command", "exit"], rows)]
    return lines


def _lock_in_markdown(line: PhaseLockIn | None) -> list[str]:
    if line is None:
        return ["_no phase on this day_", ""]
    m = line.measure
    if not m.approaches:
        return [f"- {line.phase}: no approach tried yet", ""]
    return [
        f"- {line.phase}: {m.approaches} distinct approaches in {m.attempts} attempts",
        f"- last new approach: {timezone.localtime(m.locked_in_at):%Y-%m-%d %H:%M}, "
        f"{m.share_elapsed:.0%} of the phase elapsed",
        f"- approaches, in the order tried: {_md_cell(', '.join(m.approach_names))}",
        "",
    ]


_ENGINE = Engine(autoescape=True)

_HTML = _ENGINE.from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ r.agent }} — {{ r.day|date:"Y-m-d" }}</title>
<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}
td.n{text-align:right}</style></head>
<body>
<h1>{{ r.agent }} — {{ r.day|date:"Y-m-d" }}</h1>
<p>Budget period: {{ r.period|default:"(none)" }}{% if not r.active %} · deprovisioned{% endif %}</p>
<h2>GPU</h2>
<ul><li>GPU-hours this day: {{ r.gpu_hours_day|floatformat:2 }}</li>
<li>GPU-hours used in the period (end of day): {{ r.gpu_hours_used|floatformat:2 }} of
{{ r.gpu_hours_limit|floatformat:2 }}; left {{ r.gpu_hours_left|floatformat:2 }}</li></ul>
<h2>Jobs</h2>
{% if r.jobs %}<table><tr><th>job</th><th>name</th><th>state</th><th>QOS</th><th>GPUs</th>
<th>GPU-h this day</th><th>GPU-h charged</th></tr>
{% for j in r.jobs %}<tr><td>{{ j.scheduler_id }}</td><td>{{ j.name }}</td><td>{{ j.state }}</td>
<td>{{ j.qos }}</td><td class="n">{{ j.gpus }}</td><td class="n">{{ j.gpu_hours_day|floatformat:2 }}</td>
<td class="n">{{ j.gpu_hours_charged|floatformat:2 }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>LLM API</h2>
<ul><li>calls this day: {{ r.api_calls }} ({{ r.api_tokens }} tokens)</li>
<li>spend this day: ${{ r.api_spend_day|floatformat:2 }}</li>
<li>spent in all (end of day): ${{ r.api_spent_total|floatformat:2 }} of
${{ r.api_credit_limit|floatformat:2 }}; left ${{ r.api_credit_left|floatformat:2 }}</li></ul>
<h2>Data registered</h2>
{% if r.data %}<table><tr><th>path</th><th>rows</th><th>tokens</th><th>sources</th><th>licence</th>
<th>reason</th></tr>
{% for d in r.data %}<tr><td>{{ d.path }}</td><td class="n">{{ d.rows }}</td>
<td class="n">{{ d.tokens }}</td><td>{{ d.sources }}</td><td>{{ d.licence }}</td><td>{{ d.reason }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>Checkpoints</h2>
{% if r.checkpoints %}<table><tr><th>path</th><th>job</th><th>parent</th><th>parameters</th></tr>
{% for c in r.checkpoints %}<tr><td>{{ c.path }}</td><td>{{ c.job }}</td>
<td>{{ c.parent|default:"—" }}</td><td class="n">{{ c.parameters }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>Nominations</h2>
{% if r.nominations %}<table><tr><th>phase</th><th>checkpoint</th><th>training (card)</th><th>GPU-h (card)</th><th>updated</th></tr>
{% for n in r.nominations %}<tr><td>{{ n.phase }}</td><td>{{ n.checkpoint }}</td>
<td>{{ n.training_method|default:"—" }}</td><td>{{ n.claimed_gpu_hours|default:"—" }}</td><td>{{ n.updated_at|date:"Y-m-d H:i" }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>Experiment journal</h2>
{% if r.journal %}<table><tr><th>written</th><th>kind</th><th>entry</th></tr>
{% for e in r.journal %}<tr><td>{{ e.written_at|date:"H:i" }}</td><td>{{ e.kind }}</td>
<td style="white-space:pre-wrap">{{ e.text }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>Strategy lock-in</h2>
{% with l=r.lock_in %}{% if not l %}<p>no phase on this day</p>
{% elif not l.measure.approaches %}<p>{{ l.phase }}: no approach tried yet</p>
{% else %}<ul><li>{{ l.phase }}: {{ l.measure.approaches }} distinct approaches in {{ l.measure.attempts }} attempts</li>
<li>last new approach: {{ l.measure.locked_in_at|date:"Y-m-d H:i" }}, {% widthratio l.measure.share_elapsed 1 100 %}% of the phase elapsed</li>
<li>approaches, in the order tried: {{ l.measure.approach_names|join:", " }}</li></ul>{% endif %}{% endwith %}
<h2>Trajectory</h2>
{% with t=r.trajectory %}{% if not t %}<p>not read</p>{% else %}
<ul><li>model calls: {{ t.model_calls }} · tool calls (reported by the agent): {{ t.tool_calls }} · API calls: {{ t.api_calls }}</li>
<li>scaffold's own model calls: {{ t.scaffold_calls }}, ${{ t.scaffold_spend|floatformat:2 }} this day</li>
<li>events dropped past the day's bounds: {{ t.dropped }}</li></ul>
{% for title, lines in t.command_tables %}<h3>{{ title }}</h3>
{% if lines %}<table><tr><th>time</th><th>tool</th><th>command</th><th>exit</th></tr>
{% for c in lines %}<tr><td>{{ c.at|date:"H:i:s" }}</td><td>{{ c.tool }}</td>
<td style="white-space:pre-wrap">{{ c.command }}</td><td>{{ c.exit_code|default_if_none:"—" }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}{% endfor %}{% endif %}{% endwith %}
<p><a href="index.html">all agents</a></p>
</body></html>
"""
)

_INDEX_HTML = _ENGINE.from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Daily reports — {{ day|date:"Y-m-d" }}</title>
<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}
</style></head>
<body><h1>Daily reports — {{ day|date:"Y-m-d" }}</h1>
{% if reports %}<table><tr><th>agent</th><th>jobs</th><th>GPU-h this day</th><th>GPU-h left</th>
<th>API spend this day</th><th>API credit left</th><th>data</th><th>checkpoints</th><th>nominations</th>
<th>journal</th><th>approaches</th><th>report</th></tr>
{% for r in reports %}<tr><td>{{ r.agent }}</td><td>{{ r.jobs|length }}</td>
<td>{{ r.gpu_hours_day|floatformat:2 }}</td><td>{{ r.gpu_hours_left|floatformat:2 }}</td>
<td>${{ r.api_spend_day|floatformat:2 }}</td><td>${{ r.api_credit_left|floatformat:2 }}</td>
<td>{{ r.data|length }}</td><td>{{ r.checkpoints|length }}</td><td>{{ r.nominations|length }}</td>
<td>{{ r.journal|length }}</td><td>{{ r.lock_in.measure.approaches|default_if_none:"—" }}</td>
<td><a href="{{ r.agent }}.html">HTML</a> · <a href="{{ r.agent }}.md">Markdown</a></td></tr>
{% endfor %}</table>{% else %}<p>No agents.</p>{% endif %}
{% for a in analyses %}<h2>Analyses, {{ a.competition }} (Spearman ρ)</h2>
<table><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in a.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table><p>{{ a.note }}</p>
{% endfor %}
</body></html>
"""
)


def report_html(report: AgentDay) -> str:
    return _HTML.render(Context({"r": report}))


def index_markdown(
    day: dt.date, reports: list[AgentDay], analyses: list[Analyses] | None = None
) -> str:
    lines = [f"# Daily reports — {day.isoformat()}", ""]
    lines += _md_table(
        ["agent", "jobs", "GPU-h this day", "GPU-h left", "API spend this day", "API credit left",
         "data", "checkpoints", "nominations", "journal", "approaches", "report"],
        [
            [r.agent, len(r.jobs), f"{r.gpu_hours_day:.2f}", f"{r.gpu_hours_left:.2f}",
             f"${r.api_spend_day:.2f}", f"${r.api_credit_left:.2f}", len(r.data),
             len(r.checkpoints), len(r.nominations), len(r.journal),
             r.lock_in.measure.approaches if r.lock_in else "—", f"[{r.agent}]({r.agent}.md)"]
            for r in reports
        ],
    )  # fmt: skip
    for a in analyses or []:
        lines += [f"## Analyses, {a.competition} (Spearman ρ)", ""]
        lines += _md_table(CORRELATION_COLUMNS, a.rows)  # type: ignore[arg-type]
        lines += [a.note, ""]
    return "\n".join(lines).rstrip() + "\n"


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
    agents = list(Agent.objects.order_by("name"))
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
    index_html = _INDEX_HTML.render(
        Context({"day": day, "reports": reports, "analyses": analyses,
                 "columns": CORRELATION_COLUMNS})
    )  # fmt: skip
    for name, text in (("index.md", index_markdown(day, reports, analyses)),
                       ("index.html", index_html)):  # fmt: skip
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written
