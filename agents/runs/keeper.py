"""`python -m agents.runs.keeper RUN_ID`: one attempt of an agent run, from start to record.

Started detached by the supervisor (its own session, parent gone), so neither the supervisor's
nor the web platform's restart touches a run. It issues the attempt's scaffold token, creates
the run's limits, starts the child, waits, holds the deadline, and on the way out ends every
process of the attempt, writes the outcome (the platform-owned status file, then the
database), revokes the token and removes the group. What comes next (a restart after a
crash, `failed`) is the supervisor's decision, not the keeper's.

The keeper itself never loads Django: a process with the whole platform imported is about
130 MB, and there is one keeper per running agent. Its two moments with the database run as
short-lived children of its own (`--step prepare` before the attempt, `--step record` after),
so what stays resident while an agent works is a plain Python process of about 20 MB. A stop
reaches it as SIGUSR1 (the supervisor sends it again each round until the run has ended).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from agents.runs.folders import run_tmp_key, status_write
from agents.runs.limits import RunLimits, RunLimitValues, limits_for

PR_SET_PDEATHSIG = 1
HARNESS_SETTINGS = re.compile(r"(ARENA|AGENTS|CLUSTER|EVALS)_[A-Z0-9_]+|DATABASE_URL|REDIS_URL")
HARNESS_BASICS = {
    "DJANGO_SETTINGS_MODULE", "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR",
    "PYTHONPATH", "VIRTUAL_ENV",
}  # fmt: skip
STEP_TIMEOUT_S = 120
RECORD_TRIES = 5
# The platform's harness ends with these statuses when it decided to stop (agents.harness.loop
# ExitCode; the keeper does not import the harness): the run is over, and a restart would only
# spend the scaffold's budget again. Any other non-zero status is a crash.
HARNESS_DECISIONS = {
    3: "reached its turn limit",
    4: "reached its deadline",
    5: "its scaffold budget is spent",
}


def harness_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What the arena harness gets of the platform's environment: the platform's settings
    (the names arena/settings.py reads) and the process's basics. Nothing else of what the
    supervisor holds (upstreams' and judges' keys, `HF_*`, whatever the operator exported)
    is in the process whose tools the agent drives."""
    return {
        name: value
        for name, value in environ.items()
        if (name in HARNESS_BASICS or HARNESS_SETTINGS.fullmatch(name))
        and not name.endswith("_API_KEY")
    }


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
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        with os.fdopen(os.open(self.path, flags, 0o600), "ab") as out:
            while chunk := stream.read1(65536):  # type: ignore[attr-defined]
                room = max(0, self.limit - self.written)
                if room:
                    out.write(chunk[:room])
                    out.flush()
                    self.written += min(room, len(chunk))
                self.dropped += max(0, len(chunk) - room)
            if self.dropped:
                note = f"\n[rsi-arena: output cut at {self.limit} bytes; {self.dropped} more dropped]\n"
                out.write(note.encode())

    def close(self, timeout: float = 5.0) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


class Keeper:
    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.stop_signalled = threading.Event()
        self.terminated = False
        signal.signal(signal.SIGUSR1, lambda *_: self.stop_signalled.set())
        signal.signal(signal.SIGTERM, self._on_terminate)

    def attempt(self) -> int:
        spec = _step("prepare", self.run_id, {"keeper_pid": os.getpid()})
        if not spec.get("mine"):
            print(f"run {self.run_id}: not mine to keep ({spec.get('why', 'stopped')})")
            return 0
        folder = Path(spec["folder"])
        values = RunLimitValues(**spec["limits"])
        limits = limits_for(
            self.run_id,
            values,
            unix_user=spec["unix_user"],
            kind=spec["limits_kind"],
            root=spec["cgroup_root"],
        )
        deadline = datetime.fromisoformat(spec["deadline"])
        log = BoundedLog(folder / f"attempt-{spec['attempt']}.log", spec["log_max_bytes"])
        outcome: dict[str, Any] = {"attempt": spec["attempt"], "keeper_pid": os.getpid()}
        private = None
        child: subprocess.Popen[bytes] | None = None
        try:
            limits.create()
            argv, cwd, preexec = spec["argv"], spec["cwd"], _die_with_parent
            from cluster import private_tmp  # standard library only

            # The attempt's /tmp on the agent's volume: the command's whole child runs under
            # it; the arena harness enters it for each tool call (agents.harness.run).
            private = private_tmp.prepare(spec["unix_user"], run_tmp_key(self.run_id))
            if spec["harness"] == "command":
                argv = [*(private.prefix if private else []), *argv]

                def preexec() -> None:
                    _die_with_parent()
                    limits.preexec()

            env = dict(spec["env"])
            if spec["harness"] == "arena":  # the platform's own process: its settings
                env = {**harness_environment(os.environ), **env}
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
            reason = self._wait(child, deadline, limits, grace=spec["stop_grace_s"])
            code = child.returncode
            # Whatever the child left behind (a daemon it setsid'd) ends with the attempt.
            limits.kill_all()
            if reason:
                outcome.update(state="stopped", exit_code=code, reason=reason)
            elif code == 0:
                outcome.update(state="finished", exit_code=0, detail="exited 0")
            elif spec["harness"] == "arena" and code in HARNESS_DECISIONS:
                words = f"the harness ended: {HARNESS_DECISIONS[code]} (exit {code})"
                outcome.update(state="finished", exit_code=code, detail=words)
            else:
                words = self._crash_words(code, limits)
                outcome.update(state="crashed", exit_code=code, detail=words)
        except Exception as error:  # anything the agent's account or the host can make happen
            words = f"the attempt could not run: {type(error).__name__}: {error}"
            outcome.update(state="crashed", exit_code=None, detail=words)
            if child is not None and child.poll() is None:
                _kill_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                limits.kill_all()
        finally:
            log.close()
            if private is not None:
                from cluster import private_tmp

                private_tmp.release(private)
            try:
                limits.remove()
            except Exception as error:
                outcome["cleanup"] = f"removing the limits failed: {error}"
        outcome.update(ended_at=datetime.now(UTC).isoformat(), log_bytes=log.written)
        # The file first: if the database is away, the supervisor reads the outcome there.
        status_write(folder, outcome)
        for attempt in range(RECORD_TRIES):
            try:
                _step("record", self.run_id, outcome)
                break
            except Exception as error:
                print(f"run {self.run_id}: recording failed ({error}); retrying", flush=True)
                time.sleep(2**attempt)
        return 0

    def _wait(
        self, child: subprocess.Popen[bytes], deadline: datetime, limits: RunLimits, *, grace: float
    ) -> str:
        """Wait for the child; stop it at the deadline or when signalled. Returns why it was
        stopped, or "" when it ended by itself (or the keeper was terminated: a crash)."""
        while child.poll() is None:
            reason = ""
            if datetime.now(UTC) >= deadline:
                reason = "its deadline passed"
            elif self.stop_signalled.is_set():
                reason = "stop requested"
            if reason or self.terminated:
                self._end(child, limits, grace)
                return reason
            time.sleep(0.1)
        return ""

    def _end(self, child: subprocess.Popen[bytes], limits: RunLimits, grace: float) -> None:
        """SIGTERM to the child's group and the run's group, SIGKILL to both after the grace."""
        _kill_group(child.pid, signal.SIGTERM)
        limits.kill_all(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace)
        _kill_group(child.pid, signal.SIGKILL)
        limits.kill_all()
        child.wait()

    def _on_terminate(self, signum: int, frame: object) -> None:
        # The host is going down or someone ended the keeper: end the attempt; it counts as a
        # crash, so the supervisor starts it again when it can.
        self.terminated = True

    def _crash_words(self, code: int, limits: RunLimits) -> str:
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


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _step(name: str, run_id: int, payload: dict[str, Any]) -> dict[str, Any]:
    """One of the keeper's moments with the database, in a child that loads Django and exits.
    The payload and the answer travel over pipes: the token never touches a disk."""
    done = subprocess.run(
        [sys.executable, "-m", "agents.runs.keeper", "--step", name, str(run_id)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"step {name} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--step" and argv[3].isdigit():
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
        import django

        django.setup()
        from agents.runs import keeper_steps

        payload = json.loads(sys.stdin.read(1 << 20))
        answer = getattr(keeper_steps, f"step_{argv[2]}")(int(argv[3]), payload)
        print(json.dumps(answer, default=str))
        return 0
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m agents.runs.keeper RUN_ID", file=sys.stderr)
        return 2
    # A stop can be signalled as soon as the supervisor knows the pid: never die of it.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    return Keeper(int(argv[1])).attempt()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
