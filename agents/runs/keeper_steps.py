"""The keeper's two moments with the database, run in short-lived children (see keeper.py):
`prepare` claims the attempt and hands over what to run, `record` writes how it ended."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agents.runs.folders import run_folder
from agents.runs.limits import available_kind
from agents.runs.models import AgentRun
from agents.runs.processes import start_time
from agents.services import scaffold_token_issue, scaffold_tokens_revoke
from cluster.as_user import as_user


def step_prepare(run_id: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Claim the run's current attempt for the keeper (another live keeper holding it wins),
    issue its scaffold token and say what to run, as whom, where and under which limits."""
    keeper_pid = int(payload["keeper_pid"])
    started = start_time(keeper_pid)
    claimed = (
        AgentRun.objects.filter(pk=run_id, state=AgentRun.State.RUNNING, stop_requested_at=None)
        .filter(Q(keeper_pid=None) | Q(keeper_pid=keeper_pid, keeper_started=started))
        .update(keeper_pid=keeper_pid, keeper_started=started)
    )
    if claimed != 1:
        # Stopped before its keeper got here: nothing ran, so the run ends now, not on the
        # supervisor's next round.
        AgentRun.objects.filter(
            Q(keeper_pid=None) | Q(keeper_pid=keeper_pid),
            pk=run_id,
            state=AgentRun.State.RUNNING,
            stop_requested_at__isnull=False,
        ).update(
            state=AgentRun.State.STOPPED,
            detail="stopped before the attempt began",
            ended_at=timezone.now(),
            keeper_pid=None,
            keeper_started=None,
        )
        return {"mine": False, "why": "stopped, or kept by another keeper"}
    run = AgentRun.objects.select_related("agent").get(pk=run_id)
    kind = settings.AGENTS_RUNS_LIMITS
    kind = available_kind() if kind == "auto" else kind
    AgentRun.objects.filter(pk=run_id).update(limits_kind=kind)
    token = scaffold_token_issue(agent=run.agent)
    url = settings.AGENTS_ARENA_URL.rstrip("/")
    if run.harness == AgentRun.Harness.COMMAND:
        argv, env, cwd = _command_child(run, token, url)
    else:
        argv = [sys.executable, "-m", settings.AGENTS_HARNESS_MODULE, "--run", str(run.pk)]
        # Added by the keeper to the platform's settings (keeper.harness_environment).
        env = {
            "ARENA_SCAFFOLD_TOKEN": token,
            "ARENA_PROXY_URL": f"{url}/proxy/v1",
            "ARENA_RUN_ID": str(run.pk),
        }
        cwd = str(settings.BASE_DIR)
    return {
        "mine": True,
        "attempt": run.attempts,
        "harness": run.harness,
        "argv": argv,
        "env": env,
        "cwd": cwd,
        "unix_user": run.agent.unix_user,
        "limits": {
            "cpus": run.cpus,
            "memory_mib": run.memory_mib,
            "max_processes": run.max_processes,
        },
        "limits_kind": kind,
        "cgroup_root": settings.AGENTS_RUNS_CGROUP_ROOT,
        "deadline": run.deadline.isoformat(),
        "folder": str(run_folder(settings.AGENTS_RUNS_DIR, run.pk)),
        "log_max_bytes": settings.AGENTS_RUNS_LOG_MAX_BYTES,
        "stop_grace_s": settings.AGENTS_RUNS_STOP_GRACE_S,
    }


def _command_child(run: AgentRun, token: str, url: str) -> tuple[list[str], dict[str, str], str]:
    """The organizers' argv as the agent's own user in its sandbox, in a clean environment
    (the keeper hands it to Popen: cluster.as_user) that names the gateway and the scaffold
    token, never an upstream's key."""
    home = run.agent.sandbox
    env = {
        "HOME": home,
        "PATH": f"{home}/.arena/bin:/usr/local/bin:/usr/bin:/bin",
        "ARENA_URL": url,
        "ARENA_RUN_ID": str(run.pk),
        "OPENAI_BASE_URL": f"{url}/proxy/v1",
        "OPENAI_API_KEY": token,
        # Anthropic's SDK (and Claude Code-style scaffolds) add /v1/messages themselves.
        "ANTHROPIC_BASE_URL": f"{url}/proxy",
        "ANTHROPIC_API_KEY": token,
    }
    if run.model:
        env["ARENA_MODEL"] = run.model
    started = as_user(run.agent.unix_user, run.command, env=env)
    return started.argv, started.env, home


def step_record(run_id: int, outcome: dict[str, Any]) -> dict[str, Any]:
    """How the attempt ended, written only while the keeper still holds the run; the token
    is revoked either way. A crash leaves the run `running` with no keeper: the supervisor
    decides whether it restarts."""
    run = AgentRun.objects.select_related("agent").get(pk=run_id)
    scaffold_tokens_revoke(agent=run.agent)
    now = timezone.now()
    state = outcome["state"]
    detail = outcome.get("detail", "")
    if state == "stopped":
        detail = f"stopped: {run.stop_reason or outcome.get('reason', 'stop requested')}"
    fields: dict[str, Any] = {
        "exit_code": outcome.get("exit_code"),
        "detail": str(detail)[:2000],
        "attempt_ended_at": now,
        "keeper_pid": None,
        "keeper_started": None,
    }
    if state in (AgentRun.State.FINISHED, AgentRun.State.STOPPED):
        fields.update(state=state, ended_at=now)
    written = AgentRun.objects.filter(
        pk=run_id, keeper_pid=int(outcome["keeper_pid"]), attempts=int(outcome["attempt"])
    ).update(**fields)
    return {"written": written, "pid": os.getpid()}
