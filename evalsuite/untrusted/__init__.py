"""Run untrusted Python (what a contestant's model answered) with none of the platform's powers.

The agent chooses what its model answers, so the code scorer runs adversarial code. Each
program runs:

- as the dedicated unprivileged user `arena-untrusted` (created on demand when the platform is
  root, no home, no shell, no supplementary groups), never as the platform's user. Where the
  platform is not root, or the kernel refuses the namespaces below, `run_python` raises
  UntrustedRunError (the sample is unscored, never correct) unless a developer sets
  EVALS_ALLOW_UNCONFINED_CODE=1: then it runs as the current user, said in a log line;
- in a private, empty, 0700 folder owned by that user: with root, fresh mount, network, IPC
  and PID namespaces (no network: a loopback that is down; every mount read-only; its own
  /proc, and `kill(-1)` reaches only the run's processes) with small tmpfs mounts over /tmp,
  /var/tmp and /dev/shm (gone with the run), and a pids cgroup of its own where a pids
  controller is at hand (runs share the uid, so its RLIMIT_NPROC would be one pool);
  otherwise (allowed for development only) a temporary folder removed after;
- under a seccomp filter that refuses socket(AF_UNIX) and io_uring: a Unix socket in the
  filesystem (an agent's) is not closed by a network namespace;
- with an empty environment (PATH only), stdin closed, rlimits (address space, CPU = the time
  limit, processes, file size, open files, no core), in a session of its own;
- under a root launcher (this file run as a script, stdlib only) that is a child subreaper: at
  the time limit, or when the program exits, the session and every process descended from it
  (`setsid`, double forks included) are killed, so nothing outlives the run;
- with its output (stdout and stderr together) read up to OUTPUT_CAP_BYTES, plus the last
  TAIL_BYTES; the rest is drained and dropped.

The program travels to the launcher (`launcher.py`) on a pipe, never on a command line other users can read in
/proc. With asserts (the code scorer), the program is only loaded, and the asserts run in a
judge the launcher forks as a second user, `arena-verdict`, never in the program's process
(`code_judge.py` says why that makes the verdict unforgeable).

The user's uid also goes into the firewall's `agents` set (agents/firewall.py) when Django is
configured in the process; an evaluation job without Django (a Slurm node) leaves that to the
organizer: `python manage.py shell -c "from evalsuite.untrusted import untrusted_firewall_block;
untrusted_firewall_block()"`, or the cluster's network policy for that uid.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pwd
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from evalsuite.untrusted.launcher import OUTPUT_CAP_BYTES, SAFE_PATH, TAIL_BYTES

__all__ = [
    "ALLOW_UNCONFINED",
    "OUTPUT_CAP_BYTES",
    "TAIL_BYTES",
    "Outcome",
    "UntrustedRunError",
    "run_python",
    "untrusted_firewall_block",
    "unconfined_allowed",
    "untrusted_identity",
    "verdict_identity",
]

log = logging.getLogger(__name__)

UNTRUSTED_USER = "arena-untrusted"
VERDICT_USER = "arena-verdict"  # runs the asserts: not the answer's user, so out of its reach
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
LAUNCHER_GRACE_S = 30.0
LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
# Without root and namespaces the answer runs as the platform's user on the host's network: a
# developer's setting only, and `run_python` refuses without it.
ALLOW_UNCONFINED = "EVALS_ALLOW_UNCONFINED_CODE"


class UntrustedRunError(RuntimeError):
    """The program could not be run at all (not the program's own failure)."""


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None when killed at the time limit
    output: bytes  # the first OUTPUT_CAP_BYTES of stdout and stderr together
    tail: bytes  # the last TAIL_BYTES
    truncated: bool
    timed_out: bool
    user: str  # whom it ran as
    isolation: str  # "mount, network, IPC and PID namespaces; ..." or "temporary folder"
    passed: bool | None = None  # with asserts: the judge's verdict (None: no asserts)
    verdict: str = ""  # the judge's reason


# --- the platform's side -----------------------------------------------------------------------

_identity_lock = threading.Lock()
_identity: tuple[int, int, str] | None = None
_verdict_identity: tuple[int, int, str] | None = None
_warned_unprivileged = False


def unconfined_allowed() -> bool:
    """Whether a developer allowed code to run without the namespaces (off by default)."""
    return os.environ.get(ALLOW_UNCONFINED, "") == "1"


def verdict_identity() -> tuple[int, int, str] | None:
    """(uid, gid, name) of the user that runs the asserts, made on demand; None when not root."""
    global _verdict_identity
    if os.geteuid() != 0:
        return None
    with _identity_lock:
        if _verdict_identity is None:
            _verdict_identity = _ensure_user(VERDICT_USER)
        return _verdict_identity


def untrusted_identity() -> tuple[int, int, str] | None:
    """(uid, gid, name) of the unprivileged user, made on demand; None when not root."""
    global _identity, _warned_unprivileged
    if os.geteuid() != 0:
        if not _warned_unprivileged:
            _warned_unprivileged = True
            me = pwd.getpwuid(os.geteuid()).pw_name
            log.warning(
                "not root: untrusted code runs as the current user %s (still with an empty "
                "environment, rlimits, a private folder and every process killed after), "
                "not as %s, and can reach this process: its code verdicts are not trustworthy",
                me,
                UNTRUSTED_USER,
            )
        return None
    with _identity_lock:
        if _identity is None:
            _identity = _ensure_user(UNTRUSTED_USER)
            _firewall_block_quietly()
        return _identity


def _ensure_user(name: str) -> tuple[int, int, str]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--user-group", name],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        try:  # another process may have made it meanwhile
            entry = pwd.getpwnam(name)
        except KeyError:
            raise UntrustedRunError(
                f"cannot create the user {name}: {done.stderr.strip()}"
            ) from None
        log.info("created the unprivileged user %s (uid %d)", name, entry.pw_uid)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise UntrustedRunError(f"{name} has uid or gid 0: refusing to use it")
    return entry.pw_uid, entry.pw_gid, name


def untrusted_firewall_block() -> None:
    """Keep the user off the platform's ports, as agents are (Django must be configured)."""
    from agents.firewall import agent_firewall_block

    agent_firewall_block(unix_user=UNTRUSTED_USER)


def _firewall_block_quietly() -> None:
    try:
        from django.apps import apps
        from django.conf import settings

        if not (settings.configured and apps.ready):
            log.info(
                "no Django here: the organizer keeps %s off the platform's ports "
                "(evalsuite/untrusted/)",
                UNTRUSTED_USER,
            )
            return
        untrusted_firewall_block()
    except Exception as failed:  # the run is still confined; the organizer is told
        log.warning("could not add %s to the firewall's agents set: %s", UNTRUSTED_USER, failed)


def run_python(
    program: str,
    *,
    timeout_s: float,
    asserts: str | None = None,
    setup: str = "",
    answer_names: tuple[str, ...] = (),
) -> Outcome:
    """Run `program` with the confinement above and return what it did. With `asserts`, the
    program is only loaded, and the asserts run in the judge's process against its functions
    (`code_judge.py`), after the benchmark's `setup` code, with `answer_names` the answer's even
    where the setup defines them; `Outcome.passed` is the judge's verdict."""
    allowed = unconfined_allowed()
    if os.geteuid() != 0 and not allowed:
        raise UntrustedRunError(
            f"not root: the answer would run as this process's own user with its network; "
            f"set {ALLOW_UNCONFINED}=1 to run it anyway on a developer's machine"
        )
    identity = untrusted_identity()
    judge = verdict_identity() if asserts is not None else None
    config = {
        "uid": identity[0] if identity else None,
        "gid": identity[1] if identity else None,
        "user": identity[2] if identity else pwd.getpwuid(os.geteuid()).pw_name,
        "verdict_uid": judge[0] if judge else None,
        "verdict_gid": judge[1] if judge else None,
        "timeout_s": float(timeout_s),
        "python": _interpreter(unprivileged=identity is not None),
        "allow_unconfined": allowed,
    }
    work = {"program": program, "asserts": asserts, "setup": setup,
            "answer_names": list(answer_names)}  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-B", str(LAUNCHER), json.dumps(config)],
            input=json.dumps(work).encode(),
            capture_output=True,
            timeout=timeout_s + LAUNCHER_GRACE_S,
            env={"PATH": SAFE_PATH},
        )
    except subprocess.TimeoutExpired:
        raise UntrustedRunError("the launcher itself did not finish") from None
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise UntrustedRunError(
            f"the launcher failed (exit {done.returncode}): {done.stderr[-2000:]!r}"
        ) from None
    if "error" in result:
        raise UntrustedRunError(result["error"])
    if identity is not None and result["isolation"] == "temporary folder":
        log.warning(
            "root, but the kernel refused new namespaces: %s ran with this host's network "
            "and /tmp (only the firewall's agents set keeps it off the platform's ports)",
            UNTRUSTED_USER,
        )
    return Outcome(
        returncode=result["returncode"],
        output=base64.b64decode(result["output"]),
        tail=base64.b64decode(result["tail"]),
        truncated=result["truncated"],
        timed_out=result["timed_out"],
        user=result["user"],
        isolation=result["isolation"],
        passed=result["passed"],
        verdict=result["verdict"],
    )


def _interpreter(*, unprivileged: bool) -> str:
    """This interpreter, or (for the unprivileged user, who may not reach a virtual environment
    under a private home) the first system Python everyone can run."""
    candidates = [sys.executable, os.path.realpath(sys.executable), *SYSTEM_PYTHONS]
    for path in candidates if unprivileged else candidates[:1]:
        if _everyone_runs(path):
            return path
    if not unprivileged:
        return sys.executable
    raise UntrustedRunError(f"no Python that {UNTRUSTED_USER} may run: install python3")


def _everyone_runs(path: str) -> bool:
    real = Path(os.path.realpath(path))
    try:
        if not real.is_file() or real.stat().st_mode & 0o005 != 0o005:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in real.parents)
    except OSError:
        return False
