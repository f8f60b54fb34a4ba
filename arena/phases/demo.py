"""The whole competition, small: what `make demo` runs.

Three reference agents with different recipes train the tiny base model in phase 1 (real TRL
jobs on the cluster backend), the organizer freezes, the nominated models and the references
are served, a simulated crowd votes through the real site, phase 2 gives each agent the votes
about its own model, they train again, and the final leaderboard shows each agent's change.
Every step goes through the same services, API and CLI as the real thing; the only liberty
taken is the organizer ending each phase as soon as every agent has nominated, instead of
waiting for the calendar.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from importlib import import_module
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User

from agents.harness.scripted_upstream import KEY_VARIABLE as SCRIPTED_KEY_VARIABLE
from agents.models import Agent, Nomination, Upstream
from agents.reference.install import reference_agent_install
from agents.runs.models import AgentRun
from agents.runs.services import run_stop, runs_supervise
from agents.sandboxes import UnixSandboxes
from agents.services import agent_deprovision, agent_provision, agent_unix_user
from arena.battles.models import Answer
from arena.competition.models import Competition, Phase
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import snapshot_latest
from arena.phases.competition_file import competition_apply, competition_file_load
from arena.phases.models import PhaseContestant
from arena.phases.services import (
    REFERENCE_NAMES,
    evaluations_queue_served,
    phase_arena_close_early,
    phase_end_early,
    phases_tick,
)
from arena.phases.serving import ArenaServers
from cluster import private_tmp
from cluster.as_user import as_user
from cluster.backends import cluster_backend
from cluster.backends.local import LocalBackend
from evalsuite.models import BenchmarkResult, EvalRun
from evalsuite.registry import unmeasured_notes
from evalsuite.report_text import excluded_words, headline_words
from evalsuite.selectors import phase_report
from evalsuite.services import evaluations_collect
from safety.selectors import findings_for_dashboard
from safety.services import audit_run

# name -> recipe: three different agents, so the arena has something to compare.
DEMO_AGENTS = {"ref_sft": "sft", "ref_lora": "lora", "ref_dpo": "sft-dpo"}
COMPETITION = "demo"
DEMO_FILE = Path(__file__).resolve().parents[2] / "infra" / "competitions" / "demo.toml"
# The harness-driven agent: the platform's own harness (agents/harness), supervised like any
# run, its model the scripted upstream playing policies/demo.json (no model here can use tools).
HARNESS_AGENT = "scout"
HARNESS_MODEL = "scripted-agent"
HARNESS_POLICY = (
    Path(__file__).resolve().parents[2] / "agents" / "harness" / "policies" / "demo.json"
)
HARNESS_RUN_TIMEOUT_S = 600.0

Say = Callable[[str], None]


@dataclass
class StageClock:
    """Wall time per stage, for the closing table."""

    stages: list[tuple[str, float]] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)
    _current: str | None = None

    def stage(self, name: str) -> None:
        now = time.monotonic()
        if self._current is not None:
            self.stages.append((self._current, now - self._started))
        self._current, self._started = name, now

    def finish(self) -> None:
        self.stage("(end)")
        self._current = None


@dataclass
class DemoOutcome:
    """What worked and what did not, for the last screen and the exit code: the demo checks
    its own result instead of printing a table of n/a and calling it a success."""

    worked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def check(self, ok: bool, worked: str, failed: str) -> bool:
        (self.worked if ok else self.failed).append(worked if ok else failed)
        return ok

    def lines(self) -> list[str]:
        return [f"  ok    {line}" for line in self.worked] + [
            f"  FAIL  {line}" for line in self.failed
        ]

    def reason(self) -> str:
        """One line: why the demo did not work."""
        more = (
            f" (and {len(self.failed) - 1} more problem(s) above)" if len(self.failed) > 1 else ""
        )
        return f"the demo did not work: {self.failed[0]}{more}"


# --- the agents' software and the shared base model -------------------------------------------
TRAINING_ENV_SETUP = Path(__file__).resolve().parents[2] / "infra" / "training_env" / "setup.sh"


def training_environment_ensure(say: Say) -> Path:
    """The environment agents' jobs run (AGENTS_TRAIN_ENV), built if missing from an
    interpreter every agent's Unix user can execute; returns its python."""
    target = settings.AGENTS_TRAIN_ENV
    process = subprocess.Popen(
        ["bash", str(TRAINING_ENV_SETUP)],
        env={**os.environ, "TRAIN_ENV": str(target)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if "is ignored: it is neither a file nor a directory" not in line:
            say(line.rstrip())
    if process.wait() != 0:
        raise RuntimeError(f"the training environment at {target} could not be built (see above)")
    return settings.AGENTS_TRAIN_PYTHON


FIREWALL_SETUP = Path(__file__).resolve().parents[2] / "infra" / "firewall" / "setup.sh"


def firewall_ensure(say: Say) -> None:
    """The packet filter that keeps agents' users off the platform's ports (provisioning adds
    each agent to it): installed here when missing, as on a fresh machine."""
    done = subprocess.run(
        ["bash", str(FIREWALL_SETUP)], capture_output=True, text=True, check=False
    )
    for line in (done.stdout + done.stderr).splitlines():
        say(line)
    if done.returncode != 0:
        raise RuntimeError("the agents' firewall could not be installed (see above)")


def base_model_share(base: Path) -> Path:
    """Publish the base model where every agent may read it and none may change it: a copy
    owned by root under AGENTS_SHARED_MODELS_DIR (the platform's own var/ stays private)."""
    shared_root = settings.AGENTS_SHARED_MODELS_DIR
    target = shared_root / base.name
    staging = shared_root / f".{base.name}.new"
    shared_root.mkdir(parents=True, exist_ok=True)
    shared_root.chmod(0o755)
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(base, staging, symlinks=False)
    for path in [staging, *staging.rglob("*")]:
        os.chown(path, 0, 0, follow_symlinks=False)
        path.chmod(0o755 if path.is_dir() else 0o644)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def competition_start(base: Path, instruct: Path) -> Competition:
    """The competition of infra/competitions/demo.toml (two phases starting now; the
    organizer ends them early, see module doc), with the tiny models just built."""
    spec = competition_file_load(DEMO_FILE)
    if spec.name != COMPETITION:
        raise RuntimeError(f"{DEMO_FILE} names competition {spec.name!r}, not {COMPETITION!r}")
    competition_apply(replace(spec, base_model=str(base), instruct_model=str(instruct)))
    return Competition.objects.get(name=COMPETITION)


def agents_provision(say: Say) -> list[Agent]:
    sandboxes = UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)
    agents = []
    for name in DEMO_AGENTS:
        if Agent.objects.filter(name=name, active=True).exists():
            agent_deprovision(name=name, sandboxes=sandboxes)
        # A demo agent starts with an empty sandbox: an earlier run's storage (its folder, or
        # its quota image and mounts) is given back first.
        if (settings.AGENTS_SANDBOX_ROOT / agent_unix_user(name)).exists():
            sandboxes.remove(agent_unix_user(name))
        provisioned = agent_provision(name=name, sandboxes=sandboxes)
        reference_agent_install(Path(provisioned.agent.sandbox), provisioned.agent.unix_user)
        agents.append(provisioned.agent)
        say(f"{name:<9} sandbox {provisioned.agent.sandbox}, recipe {DEMO_AGENTS[name]}")
    return agents


def harness_agent_provision(say: Say) -> Agent:
    """The agent the platform's harness drives: provisioned like the others, with no reference
    scripts in its sandbox (its policy does the work through `arena-agent`)."""
    sandboxes = UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)
    if Agent.objects.filter(name=HARNESS_AGENT, active=True).exists():
        agent_deprovision(name=HARNESS_AGENT, sandboxes=sandboxes)
    if (settings.AGENTS_SANDBOX_ROOT / agent_unix_user(HARNESS_AGENT)).exists():
        sandboxes.remove(agent_unix_user(HARNESS_AGENT))
    agent = agent_provision(name=HARNESS_AGENT, sandboxes=sandboxes).agent
    say(f"{HARNESS_AGENT:<9} sandbox {agent.sandbox}, the platform's harness on {HARNESS_MODEL}")
    return agent


def scripted_upstream_start(base: Path, say: Say) -> subprocess.Popen[bytes]:
    """The harness-driven agent's model: the scripted upstream (a real OpenAI-compatible
    server) playing the demo policy, behind the proxy as an `Upstream` like any LLM API."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (settings.VAR_DIR / "logs").mkdir(parents=True, exist_ok=True)
    log = (settings.VAR_DIR / "logs" / "scripted-upstream.log").open("wb")
    # The key the proxy sends, in the environment (root's to read, unlike the command line):
    # the upstream answers nothing else, so an agent on this host cannot go around the proxy.
    key = secrets.token_urlsafe(32)
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.harness.scripted_upstream", "--port", str(port),
         "--policy", str(HARNESS_POLICY), "--var", f"model_source={base}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, SCRIPTED_KEY_VARIABLE: key},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(
                f"the scripted upstream did not start (see {settings.VAR_DIR}/logs/scripted-upstream.log)"
            )
        time.sleep(0.2)
    Upstream.objects.update_or_create(
        name=HARNESS_MODEL,
        defaults={
            "base_url": f"http://127.0.0.1:{port}/v1",
            "upstream_model": HARNESS_MODEL,
            "api_key": key,
            "usd_per_million_prompt_tokens": Decimal("1"),
            "usd_per_million_completion_tokens": Decimal("2"),
            "max_completion_tokens": 1024,
        },
    )
    say(f"the scripted upstream {HARNESS_MODEL!r} on port {port}, behind the proxy")
    return process


def harness_run_wait(agent: Agent, phase: Phase, say: Say) -> AgentRun | None:
    """Supervise until the agent's run of `phase` has ended, as the phases worker would;
    None if the supervisor never started one."""
    deadline = time.monotonic() + HARNESS_RUN_TIMEOUT_S
    while True:
        for change in runs_supervise():
            say(f"run {change}")
        run = AgentRun.objects.filter(agent=agent, phase=phase).order_by("-pk").first()
        if run is not None and run.state not in AgentRun.UNFINISHED:
            say(f"{agent.name}'s run {run.pk}: {run.state} ({run.detail})")
            return run
        if time.monotonic() > deadline:
            if run is not None:
                run_stop(agent=agent, reason="the demo's wait for it ran out")
            return run
        time.sleep(1.0)


def live_events(url: str, agent: Agent) -> list[dict]:
    """The agent's latest events as its live page serves them to an organizer, fetched
    through the site with a staff session."""
    organizer, _ = User.objects.get_or_create(
        username="demo-organizer", defaults={"is_staff": True}
    )
    # A signed-in session, as the admin's login form would leave it (no password to type).
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = str(organizer.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = organizer.get_session_auth_hash()
    session.save()
    cookies = {settings.SESSION_COOKIE_NAME: session.session_key}
    page = httpx.get(f"{url}/organizer/agents/{agent.name}/live", cookies=cookies, timeout=30)
    if page.status_code != 200:
        return []
    events = httpx.get(
        f"{url}/organizer/agents/{agent.name}/live/events", cookies=cookies, timeout=30
    )
    return events.json()["events"] if events.status_code == 200 else []


def runs_end(say: Say) -> list[str]:
    """Stop every run still going (an interrupted demo) and wait for their keepers."""
    for run in AgentRun.objects.filter(state__in=AgentRun.UNFINISHED).select_related("agent"):
        run_stop(agent=run.agent, reason="the demo ends")
    deadline = time.monotonic() + 30
    while AgentRun.objects.filter(state__in=AgentRun.UNFINISHED).exists():
        if time.monotonic() > deadline:
            break
        runs_supervise()
        time.sleep(0.5)
    return [
        f"agent run {run.pk} of {run.agent.name} still {run.state}"
        for run in AgentRun.objects.filter(state__in=AgentRun.UNFINISHED).select_related("agent")
    ]


def agents_run(
    agents: list[Agent],
    phase: int,
    say: Say,
    *,
    base: Path,
    recipes: dict[str, str] = DEMO_AGENTS,
    extra: tuple[str, ...] = (),
) -> dict[str, int]:
    """Run every agent's reference script for `phase` at once, as its own Unix user, with the
    training environment's interpreter (which every agent's user can run); their output is
    shown prefixed by their name. Returns each agent's exit code."""
    python = str(settings.AGENTS_TRAIN_PYTHON)
    processes = {}
    private_tmps = []
    for number, agent in enumerate(agents):
        home = agent.sandbox
        # Its /tmp, /var/tmp and /dev/shm inside its storage quota, as for its jobs.
        private = private_tmp.prepare(agent.unix_user, f"run-phase{phase}")
        private_tmps.append(private)
        # Born with a login's environment and these, never the demo's own (cluster.as_user).
        started = as_user(agent.unix_user, [
            python, "-m", "agents.reference", f"phase{phase}",
            "--recipe", recipes[agent.name],
            *(["--base-model", str(base)] if phase == 1 else []),
            # Each agent its own seed: same recipe, same seed would mean the same data and
            # weights, which the audit rightly reports as one agent's artifact in another's hands.
            "--seed", str(number), *extra,
        ], env={
            "HOME": home, "ARENA_TRAIN_PYTHON": python, "PYTHONPATH": f"{home}/reference-agent",
        })  # fmt: skip
        processes[agent.name] = subprocess.Popen(
            [*(private.prefix if private else []), *started.argv], env=started.env, cwd=home,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    threads = [
        threading.Thread(target=_relay, args=(name, process, say), daemon=True)
        for name, process in processes.items()
    ]
    for thread in threads:
        thread.start()
    try:
        codes = {name: process.wait() for name, process in processes.items()}
    finally:  # interrupted: the agents stop with the demo
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
    for thread in threads:
        thread.join(timeout=5)
    for private in private_tmps:
        private_tmp.release(private)
    return codes


def _relay(name: str, process: subprocess.Popen[str], say: Say) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        say(f"[{name}] {line.rstrip()}")


def phase_end_now(phase: Phase) -> None:
    """The organizer ends a phase now (every agent has nominated) and opens its arena."""
    phase_end_early(phase=phase)


def arena_close_now(competition: Competition, phase: Phase) -> None:
    """The organizer closes a phase's arena now: the next phase starts now (keeping its
    length), or the last phase's arena closes."""
    if phase.competition_id != competition.pk:
        raise ValueError(f"{phase.label} is not a phase of {competition.name}")
    phase_arena_close_early(phase=phase)


def leaderboard_lines(label: str) -> list[str]:
    snapshot = snapshot_latest(source=RatingSnapshot.Source.PHASE, phase=label)
    if snapshot is None:
        return [f"{label}: no counted votes"]
    table = snapshot.style or snapshot.raw
    lines = [f"{label} leaderboard ({table['method']}, {snapshot.n_battles} battles)"]
    for row in table["scores"]:
        lines.append(
            f"  {row['rank']:>2}. {row['model']:<22} {row['score']:7.1f}"
            f"  [{row['ci_low']:7.1f}, {row['ci_high']:7.1f}]  {row['n_battles']:>4} battles"
        )
    return lines


@dataclass(frozen=True)
class AgentChange:
    agent: str
    phase_1: float | None
    phase_2: float | None
    lead_1: float | None
    lead_2: float | None

    @property
    def change(self) -> float | None:
        return None if self.lead_1 is None or self.lead_2 is None else self.lead_2 - self.lead_1


def agent_changes(agents: list[Agent]) -> list[AgentChange]:
    """Each agent's score in phase 1 and phase 2 (style-controlled when available), and the
    change of its lead over the instruct reference, which fought in both phases: each phase's
    scores are centred on that phase's own field, so the lead is the comparable number."""

    def scores(label: str) -> dict[str, float]:
        snapshot = snapshot_latest(source=RatingSnapshot.Source.PHASE, phase=label)
        if snapshot is None:
            return {}
        table = snapshot.style or snapshot.raw
        return {row["model"]: row["score"] for row in table["scores"]}

    first, second = scores("phase-1"), scores("phase-2")
    rows = []
    for agent in agents:
        before = first.get(f"{agent.name}-phase-1")
        after = second.get(f"{agent.name}-phase-2")
        rows.append(
            AgentChange(
                agent=agent.name,
                phase_1=before,
                phase_2=after,
                lead_1=_lead(before, first.get(REFERENCE_NAMES["instruct"])),
                lead_2=_lead(after, second.get(REFERENCE_NAMES["instruct"])),
            )
        )
    return rows


def agent_change_lines(rows: list[AgentChange]) -> list[str]:
    lines = [f"  {'agent':<9} {'phase-1':>8} {'phase-2':>8}   lead over instruct: 1 -> 2"]
    for row in rows:
        change = "n/a" if row.change is None else f"{row.change:+.1f}"
        lines.append(
            f"  {row.agent:<9} {_fmt(row.phase_1)} {_fmt(row.phase_2)}   {_fmt(row.lead_1)} ->"
            f" {_fmt(row.lead_2)}  (change {change})"
        )
    return lines


def contestants_silent(phase: Phase) -> list[str]:
    """The phase's served contestants that never gave a whole answer in one of its battles."""
    served = PhaseContestant.objects.filter(phase=phase).select_related("contestant")
    silent = []
    for entry in served:
        answered = Answer.objects.filter(
            contestant=entry.contestant, battle__phase=phase.label, error=""
        ).exclude(finish_reason="")
        if not answered.exists():
            silent.append(entry.contestant.display_name)
    return sorted(silent)


def _lead(score: float | None, reference: float | None) -> float | None:
    return None if score is None or reference is None else score - reference


def _fmt(score: float | None) -> str:
    return f"{score:8.1f}" if score is not None else "     n/a"


def nominations_of(phase: Phase) -> list[str]:
    return list(
        Nomination.objects.filter(phase=phase)
        .values_list("agent__name", flat=True)
        .order_by("agent__name")
    )


def tick(say: Say) -> None:
    """One round of the phases worker: the due transitions, then the agents' runs (a running
    phase starts the runs its competition file declares; a frozen one stops them)."""
    for transition in phases_tick():
        say(f"{transition.phase.label}: {transition.from_state} -> {transition.to_state}")
    for change in runs_supervise():
        say(f"run {change}")


def serve(servers: ArenaServers, say: Say) -> None:
    for name in servers.sync():
        say(f"serving {name}")


# --- stopping ----------------------------------------------------------------------------------
def cluster_jobs_cancel(say: Say) -> None:
    """Cancel every job still pending or running on the demo's local cluster (training and
    evaluation alike: all of them are this run's, whose job folder starts empty) and wait for
    their processes to end."""
    backend = cluster_backend()
    if isinstance(backend, LocalBackend):
        cancelled = backend.cancel_everything()
        if cancelled:
            say(f"cancelled {len(cancelled)} cluster job(s): {', '.join(cancelled)}")


def agent_processes_end(agents: list[Agent], *, timeout_s: float = 15.0) -> None:
    """Whatever an agent's user still runs (a job child that left its process group, say),
    until none is left: SIGKILL is delivered at once, but a process is gone only once the
    kernel has torn it down, and one may fork between two rounds."""
    deadline = time.monotonic() + timeout_s
    while True:
        for agent in agents:
            subprocess.run(["pkill", "-KILL", "-u", agent.unix_user], check=False)
        if not leftovers(agents, jobs=False) or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def leftovers(agents: list[Agent], *, jobs: bool = True) -> list[str]:
    """Processes the demo started that are still running: its agents' and its jobs'."""
    found = []
    uids = {}
    for agent in agents:
        try:
            uids[pwd.getpwnam(agent.unix_user).pw_uid] = agent.unix_user
        except KeyError:
            continue
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if uid in uids and stat[stat.rindex(")") + 2] != "Z":
            found.append(
                f"{uids[uid]}: pid {entry.name} {stat[stat.index('(') : stat.rindex(')') + 1]}"
            )
    backend = cluster_backend()
    if jobs and isinstance(backend, LocalBackend):
        found.extend(f"cluster job {job} still running" for job in backend.running_jobs())
    return found


# --- benchmarks and audits -------------------------------------------------------------------
DEMO_EVAL_MAX_TOKENS = 48  # tiny models on a CPU: short answers keep the suite to seconds


def evaluations_start(say: Say) -> None:
    runs = evaluations_queue_served(max_tokens=DEMO_EVAL_MAX_TOKENS)
    if runs:
        say(f"evaluation suite queued: {len(runs)} cluster jobs (20 benchmarks each)")


def evaluations_wait(say: Say, *, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        evaluations_collect()
        organizers = EvalRun.objects.filter(requested_by_agent=False)  # agents' own runs aside
        pending = organizers.filter(state=EvalRun.State.QUEUED).count()
        total = organizers.count()
        say(f"evaluations: {total - pending}/{total} finished")
        if pending == 0 or time.monotonic() > deadline:
            return
        time.sleep(5)


def evaluations_unfinished(phase: Phase) -> list[str]:
    """The phase's evaluation runs that failed or never finished, with why."""
    runs = EvalRun.objects.filter(phase=phase).exclude(state=EvalRun.State.DONE)
    return [
        f"{run.model_label}: {run.state}{f' ({run.error[:120]})' if run.error else ''}"
        for run in runs.order_by("model_label")
    ]


def _score_cell(cell: dict | None) -> str:
    if cell is None:
        return "-"
    stderr = cell.get("stderr")
    return f"{cell['score']:.2f}" + (f"±{stderr:.2f}" if stderr is not None else "±?")


def benchmark_lines(phase: Phase) -> list[str]:
    """The benchmark table (benchmarks down, models across), gap closed and safety deltas."""
    report = phase_report(phase)
    models = report["models"]
    if not models:
        return [f"{phase.label}: no evaluation results"]
    names = [m["model"] for m in models]
    width = max(11, *(len(n) for n in names))
    lines = [
        f"{phase.label} benchmarks ({', '.join(n for n in names)}): "
        "score ± standard error over n items"
    ]
    lines.append(
        "  " + f"{'benchmark':<16}{'n':>5}" + "".join(f"{n[:width]:>{width + 1}}" for n in names)
    )
    benchmarks = sorted({b for m in models for b in m["scores"]})
    for name in benchmarks:
        cells = [m["scores"].get(name) for m in models]
        items = max((c["n"] or 0 for c in cells if c), default=0)
        text = "".join(f"{_score_cell(c):>{width + 1}}" for c in cells)
        lines.append(f"  {name:<16}{items:>5}{text}")
    for model in models:
        gap = model.get("gap_closed")
        if gap is not None:
            lines.append(
                f"  gap closed, {model['model']}: {headline_words(gap, model.get('headline'))}"
                f" (left out: {excluded_words(gap)})"
            )
    for label, deltas in report["safety"].items():
        flagged = [d["benchmark"] for d in deltas if d["more_harmful"]]
        summary = ", ".join(f"{d['benchmark']} {d['delta']:+.2f}" for d in deltas)
        lines.append(
            f"  safety vs base, {label}: {summary or 'no scores'}"
            + (f"  MORE HARMFUL on {', '.join(flagged)}" if flagged else "")
        )
    unscored = (
        BenchmarkResult.objects.filter(run__phase=phase, score__isnull=True)
        .values_list("benchmark", "error")
        .distinct()
    )
    reasons: dict[str, set[str]] = {}
    for name, error in unscored:
        reasons.setdefault(error or "not run", set()).add(name)
    for reason, names in sorted(reasons.items()):  # type: ignore[assignment]  # `names` is a list in an earlier loop
        lines.append(f"  not scored ({reason}): {', '.join(sorted(names))}")
    for failed in report["failed_runs"]:
        lines.append(f"  evaluation of {failed['model_label']} failed: {failed['error'][:120]}")
    lines += [f"  {note}" for note in unmeasured_notes()]
    return lines


def audit_lines(phase: Phase | None, say: Say) -> list[str]:
    report = audit_run(phase=phase, log=say)
    board = findings_for_dashboard(phase)
    lines = [
        f"audit: {len(report.agents)} agents, {report.files_scanned} files and"
        f" {report.records_scanned} data records scanned against {report.items} evaluation items;"
        f" {len(board['findings'])} findings"
    ]
    for finding in board["findings"][:20]:
        lines.append(
            f"  [{finding['severity']}] {finding['agent']}: {finding['kind']} — {finding['summary']}"
        )
    lines.append(
        "  findings are open until an organizer confirms or dismisses them (admin, or"
        " `audit confirm ID`); a confirmed violation replaces the agent's benchmark results by"
        " the base model's"
    )
    return lines
