"""The code scorer (HumanEval, MBPP) runs what a contestant's model answered, and the agent
chooses what its model answers.

Before: the answer ran as the evaluation job's user (root on the local setup) with the
platform's whole environment, in a folder it shared with nothing but able to reach everything:
it read root-only files and DATABASE_URL, wrote anywhere, printed without bound, and a child it
started with `setsid` outlived the time limit. Exiting 0 before the asserts counted as correct.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsuite import untrusted
from evalsuite.scoring import code_correct
from tests.security.conftest import CANARY_TEXT, assert_canary_untouched

ASSERTS = "assert add_numbers(2, 3) == 5\nassert add_numbers(-1, 1) == 0"
GOOD = "def add_numbers(a, b):\n    return a + b\n"
SECRET_ENV = "ARENA_TEST_PLATFORM_SECRET"
SECRET_VALUE = "postgres://platform:hunter2@db/arena"
SLEEP_SECONDS = 3137  # a number no other process on the machine sleeps for


@pytest.fixture
def root_canary() -> Iterator[Path]:
    """A root-only file in a folder everyone may pass through, outside every temporary folder
    (a private /tmp must not be what keeps it safe)."""
    base = Path("/srv") if Path("/srv").is_dir() else Path("/var/lib")
    folder = Path(tempfile.mkdtemp(prefix="arena-untrusted-test-", dir=base))
    folder.chmod(0o755)
    path = folder / "canary"
    path.write_text(CANARY_TEXT)
    path.chmod(0o600)
    yield path
    shutil.rmtree(folder)


@pytest.fixture
def tmp_canaries() -> Iterator[tuple[Path, Path]]:
    """A root-owned file in /tmp everyone may read, and a /tmp name that does not exist."""
    name = f"arena-untrusted-canary-{os.getpid()}"
    existing, missing = Path("/tmp") / name, Path("/tmp") / f"{name}-new"
    existing.write_text("root's file in /tmp\n")
    existing.chmod(0o644)
    missing.unlink(missing_ok=True)
    yield existing, missing
    existing.unlink(missing_ok=True)
    missing.unlink(missing_ok=True)


@pytest.fixture
def platform_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(SECRET_ENV, SECRET_VALUE)
    return SECRET_VALUE


def sleepers() -> list[int]:
    done = subprocess.run(
        ["pgrep", "-f", f"^sleep {SLEEP_SECONDS}$"], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in done.stdout.split()]


@pytest.fixture
def no_sleepers() -> Iterator[None]:
    assert not sleepers()
    yield
    for pid in sleepers():  # only the ones this test's answers started
        os.kill(pid, signal.SIGKILL)


def attack(root_canary: Path, existing: Path, missing: Path, *, then: str = "") -> str:
    """An answer that tries everything, passes the asserts, and hands whatever it got to the
    outside through the two /tmp files."""
    return f"""```python
import os, subprocess, sys
loot = []
try:
    loot.append(open({str(root_canary)!r}).read())
except OSError as failed:
    loot.append(f"no canary: {{failed}}")
loot.append(repr(os.environ.get({SECRET_ENV!r})))
loot.append(repr(sorted(os.environ)))
for path in ({str(existing)!r}, {str(missing)!r}):
    try:
        with open(path, "a") as out:
            out.write("\\n".join(loot))
    except OSError:
        pass
subprocess.Popen(["setsid", "sleep", "{SLEEP_SECONDS}"], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, start_new_session=True)
os.system("setsid sleep {SLEEP_SECONDS} >/dev/null 2>&1 &")
print("leaked:", loot)
{then}
{GOOD}
```"""


def test_a_hostile_answer_reads_writes_and_leaves_nothing(
    root_canary, tmp_canaries, platform_secret, no_sleepers
):
    existing, missing = tmp_canaries
    started = time.monotonic()
    code_correct(attack(root_canary, existing, missing), ASSERTS)
    assert time.monotonic() - started < 15
    assert_canary_untouched(root_canary)
    assert existing.read_text() == "root's file in /tmp\n"
    assert (existing.stat().st_uid, existing.stat().st_mode & 0o777) == (0, 0o644)
    assert not missing.exists()
    time.sleep(0.5)
    assert not sleepers(), "a process the answer started with setsid outlived the scoring"


def test_the_answer_sees_no_platform_environment_and_no_secret(root_canary, platform_secret):
    program = (
        "import os\n"
        f"print('SECRET', os.environ.get({SECRET_ENV!r}))\n"
        "print('ENV', sorted(os.environ))\n"
        f"try:\n    print(open({str(root_canary)!r}).read())\nexcept OSError as e:\n"
        "    print('refused', e)\n"
        "print('UID', os.getuid(), os.geteuid(), os.getgroups())\n"
    )
    outcome = untrusted.run_python(program, timeout_s=10)
    text = outcome.output.decode()
    assert outcome.returncode == 0, text
    assert SECRET_VALUE not in text and CANARY_TEXT.strip() not in text
    assert "SECRET None" in text
    env_line = next(line for line in text.splitlines() if line.startswith("ENV"))
    assert "DATABASE_URL" not in env_line and "REDIS_URL" not in env_line
    if os.geteuid() == 0:
        assert "UID 0 " not in text and "refused" in text


def test_output_is_capped_and_a_timeout_kills_the_whole_session(no_sleepers):
    started = time.monotonic()
    outcome = untrusted.run_python(
        "import sys, os\n"
        "sys.stdout.write('x' * 10_000_000)\n"
        f"os.system('setsid sleep {SLEEP_SECONDS} >/dev/null 2>&1 &')\n"
        "while True: pass\n",
        timeout_s=3,
    )
    assert time.monotonic() - started < 10
    assert outcome.timed_out and outcome.truncated
    assert len(outcome.output) <= untrusted.OUTPUT_CAP_BYTES
    time.sleep(0.5)
    assert not sleepers()


def test_a_ten_megabyte_answer_is_scored_fast_and_memory_is_bounded():
    started = time.monotonic()
    loud = f"```python\nimport sys\nsys.stdout.write('y' * 10_000_000)\n{GOOD}```"
    assert code_correct(loud, ASSERTS)
    hog = f"```python\nx = bytearray(8 << 30)\n{GOOD}```"
    assert not code_correct(hog, ASSERTS)
    assert time.monotonic() - started < 20


def test_exiting_zero_before_the_asserts_is_not_correct():
    for early in ("import sys; sys.exit(0)", "import os; os._exit(0)"):
        wrong = f"```python\ndef add_numbers(a, b):\n    return a - b\n{early}\n```"
        assert not code_correct(wrong, ASSERTS)


def test_a_correct_solution_still_scores_correct_and_a_wrong_one_does_not():
    assert code_correct(f"Here:\n```python\n{GOOD}```", ASSERTS)
    assert not code_correct("```python\ndef add_numbers(a, b):\n    return a - b\n```", ASSERTS)
    assert not code_correct("def add_numbers(a, b):\n    while True: pass", ASSERTS, timeout_s=1)
