"""`python -m agents.runs.keeper RUN_ID`: one attempt of an agent run, from start to record.

Started detached by the supervisor (its own session, parent gone), so neither the supervisor's
nor the web platform's restart touches a run. It issues the attempt's scaffold token, creates
the run's limits, starts the child, waits, holds the deadline, and on the way out ends every
process of the attempt, writes the outcome (database and the platform-owned status file),
revokes the token and removes the group. What comes next (a restart after a crash, `failed`)
is the supervisor's decision, not the keeper's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1


def run_folder(run_id: int) -> Path:
    """The run's platform-owned folder: 0700 root, never in a sandbox."""
    from django.conf import settings

    root = Path(settings.AGENTS_RUNS_DIR)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = root / str(run_id)
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def status_write(run_id: int, status: dict[str, object]) -> None:
    folder = run_folder(run_id)
    temporary = folder / "status.json.tmp"
    temporary.write_text(json.dumps(status, indent=1, default=str) + "\n")
    os.replace(temporary, folder / "status.json")


def _die_with_parent() -> None:
    """The child gets SIGKILL if its keeper dies: no harness loop outlives its keeper."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class BoundedLog:
    """Copies the child's output into a file, up to `limit` bytes, and drains the rest so the
    child never blocks on a full pipe."""

    path: Path
    limit: int
    written: int = 0
    dropped: int = 0
    thread: threading.Thread | None = field(default=None, repr=False)

    def follow(self, stream: IO[bytes]) -> None:
        self.thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self.thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as out:
            while chunk := stream.read1(65536):
                room = self.limit - self.written
                if room > 0:
                    out.write(chunk[:room])
                    out.flush()
                    self.written += min(room, len(chunk))
                self.dropped += max(0, len(chunk) - max(room, 0))
            if self.dropped:
                out.write(f"\n[rsi-arena: output cut at {self.limit} bytes; "
                          f"{self.dropped} more bytes dropped]\n".encode())  # fmt: skip

    def close(self, timeout: float = 5.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


class Keeper:
    def __init__(self, run_id: int) -> None:
        from django.conf import settings

        self.run_id = run_id
        self.settings = settings
        self.pid = os.getpid()
        self.stop_signalled = threading.Event()
        self.terminated = False
        signal.signal(signal.SIGUSR1, lambda *_: self.stop_signalled.set())
        signal.signal(signal.SIGTERM, self._on_terminate)

    # --- the database, briefly: a keeper holds no connection while it waits --------------
    def _run(self):  # type: ignore[no-untyped-def]
        from django.db import close_old_connections

        from agents.runs.models import AgentRun

        close_old_connections()
        return AgentRun.objects.select_related("agent").get(pk=self.run_id)

    def _update(self, **fields: object) -> int:
        from django.db import connection

        from agents.runs.models import AgentRun

        try:
            return AgentRun.objects.filter(pk=self.run_id, keeper_pid=self.pid).update(**fields)
        finally:
            connection.close()

    def register(self) -> bool:
        """Claim the run's current attempt; another live keeper already holding it wins."""
        from django.db.models import Q

        from agents.runs.models import AgentRun
        from agents.runs.processes import start_time

        started = start_time(self.pid)
        claimed = (
            AgentRun.objects.filter(pk=self.run_id, state=AgentRun.State.RUNNING)
            .filter(Q(keeper_pid=None) | Q(keeper_pid=self.pid, keeper_started=started))
            .update(keeper_pid=self.pid, keeper_started=started)
        )
        return claimed == 1

    # --- one attempt ----------------------------------------------------------------------
    def attempt(self) -> int:
        from django.utils import timezone

        from agents.runs.limits import RunLimitValues, limits_for
        from agents.services import scaffold_token_issue, scaffold_tokens_revoke
        from cluster import private_tmp

        if not self.register():
            print(f"run {self.run_id}: not mine to keep (stopped, or kept by another)")
            return 0
        run = self._run()
        folder = run_folder(self.run_id)
        values = RunLimitValues(run.cpus, run.memory_mib, run.max_processes)
        limits = limits_for(self.run_id, values, unix_user=run.agent.unix_user)
        private = None
        child: subprocess.Popen[bytes] | None = None
        log = BoundedLog(
            folder / f"attempt-{run.attempts}.log", self.settings.AGENTS_RUNS_LOG_MAX_BYTES
        )
        outcome: dict[str, object] = {"attempt": run.attempts}
        try:
            token = scaffold_token_issue(agent=run.agent)
            limits.create()
            self._update(limits_kind=limits.kind)
            if run.harness == "command":
                private = private_tmp.prepare(run.agent.unix_user, f"run-{self.run_id}")
                argv, env, cwd, preexec = self._command_child(run, token, limits, private)
            else:
                argv, env, cwd, preexec = self._harness_child(token)
            child = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec,
                start_new_session=True,
            )
            assert child.stdout is not None
            log.follow(child.stdout)
            reason = self._wait(child, run.deadline, limits)
            code = child.returncode
            # Whatever the child left behind (a daemon it setsid'd) ends with the attempt.
            limits.kill_all()
            if reason:
                outcome.update(state="stopped", exit_code=code, detail=f"stopped: {reason}")
            elif code == 0:
                outcome.update(state="finished", exit_code=0, detail="exited 0")
            else:
                outcome.update(
                    state="crashed", exit_code=code, detail=self._crash_words(code, limits)
                )
        except Exception as error:  # anything the agent's account or the host can make happen
            outcome.update(state="crashed", exit_code=None,
                           detail=f"the attempt could not run: {type(error).__name__}: {error}")  # fmt: skip
            if child is not None and child.poll() is None:
                _kill_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                limits.kill_all()
        finally:
            log.close()
            try:
                scaffold_tokens_revoke(agent=run.agent)
            finally:
                private_tmp.release(private)
                try:
                    limits.remove()
                except Exception as error:
                    outcome["cleanup"] = f"removing the limits failed: {error}"
        outcome.update(ended_at=timezone.now().isoformat(), log_bytes=log.written)
        self._record(outcome)
        return 0

    def _command_child(self, run, token, limits, private):  # type: ignore[no-untyped-def]
        """The organizers' argv as the agent's own user in its sandbox, in a clean environment
        that names the gateway and the scaffold token, never an upstream's key."""
        home = run.agent.sandbox
        url = self.settings.AGENTS_ARENA_URL.rstrip("/")
        env = {
            "HOME": home,
            "USER": run.agent.unix_user,
            "LOGNAME": run.agent.unix_user,
            "PATH": f"{home}/.arena/bin:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "ARENA_URL": url,
            "ARENA_RUN_ID": str(run.pk),
            "OPENAI_BASE_URL": f"{url}/proxy/v1",
            "OPENAI_API_KEY": token,
        }
        if run.model:
            env["ARENA_MODEL"] = run.model
        argv = [
            *(private.prefix if private else []),
            "/usr/sbin/runuser", "-u", run.agent.unix_user, "--", *run.command,
        ]  # fmt: skip

        def preexec() -> None:
            _die_with_parent()
            limits.preexec()

        return argv, env, home, preexec

    def _harness_child(self, token):  # type: ignore[no-untyped-def]
        """The shipped harness runs as the platform, outside the run's group (an agent that
        exhausts its memory must not take the loop down with it); it starts each tool as the
        agent itself, inside the group."""
        url = self.settings.AGENTS_ARENA_URL.rstrip("/")
        env = {
            **os.environ,
            "ARENA_SCAFFOLD_TOKEN": token,
            "ARENA_PROXY_URL": f"{url}/proxy/v1",
            "ARENA_RUN_ID": str(self.run_id),
        }
        argv = [
            sys.executable,
            "-m",
            self.settings.AGENTS_HARNESS_MODULE,
            "--run",
            str(self.run_id),
        ]
        return argv, env, str(self.settings.BASE_DIR), _die_with_parent

    def _wait(self, child: subprocess.Popen[bytes], deadline, limits) -> str:  # type: ignore[no-untyped-def]
        """Wait for the child; stop it at the deadline or when asked. Returns why it was
        stopped, or "" when it ended by itself."""
        from django.utils import timezone

        poll_every = self.settings.AGENTS_RUNS_POLL_S
        next_poll = time.monotonic()  # a stop asked for while the keeper started is seen at once
        while child.poll() is None:
            reason = ""
            if timezone.now() >= deadline:
                reason = "its deadline passed"
            elif self.terminated:
                reason = ""
            elif self.stop_signalled.is_set() or time.monotonic() >= next_poll:
                self.stop_signalled.clear()
                next_poll = time.monotonic() + poll_every
                run = self._run()
                deadline = run.deadline
                if run.stop_requested_at is not None:
                    reason = run.stop_reason or "stop requested"
                from django.db import connection

                connection.close()
            if reason or self.terminated:
                self._end(child, limits)
                return reason
            time.sleep(0.1)
        return ""

    def _end(self, child: subprocess.Popen[bytes], limits) -> None:  # type: ignore[no-untyped-def]
        """SIGTERM to the child's group and the run's group, SIGKILL to both after the grace."""
        _kill_group(child.pid, signal.SIGTERM)
        limits.kill_all(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=self.settings.AGENTS_RUNS_STOP_GRACE_S)
        _kill_group(child.pid, signal.SIGKILL)
        limits.kill_all()
        child.wait()

    def _on_terminate(self, signum: int, frame: object) -> None:
        # The host is going down or someone ended the keeper: end the attempt; it counts as a
        # crash, so the supervisor starts it again when it can.
        self.terminated = True

    def _crash_words(self, code: int, limits) -> str:  # type: ignore[no-untyped-def]
        if self.terminated:
            return "the keeper was terminated"
        # runuser reports a child killed by a signal as 128 + the signal.
        signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
        words = f"exited with code {code}"
        if signum:
            with contextlib.suppress(ValueError):
                words += f" (killed by {signal.Signals(signum).name})"
        if limits.oom_kills():
            words += f"; the kernel killed it at its memory limit of {limits.values.memory_mib} MiB"
        return words

    def _record(self, outcome: dict[str, object]) -> None:
        from django.utils import timezone

        from agents.runs.models import AgentRun

        status_write(self.run_id, outcome)
        now = timezone.now()
        fields: dict[str, object] = {
            "exit_code": outcome.get("exit_code"),
            "detail": str(outcome["detail"])[:2000],
            "attempt_ended_at": now,
            "keeper_pid": None,
            "keeper_started": None,
        }
        if outcome["state"] != "crashed":  # a crash is left running: the supervisor decides
            fields.update(state=outcome["state"], ended_at=now)
            if outcome["state"] == "finished":
                fields["state"] = AgentRun.State.FINISHED
        self._update(**fields)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m agents.runs.keeper RUN_ID", file=sys.stderr)
        return 2
    # A stop can be signalled as soon as the supervisor knows the pid: never die of it.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
    import django

    django.setup()
    return Keeper(int(argv[1])).attempt()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
