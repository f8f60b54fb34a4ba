"""Issue 12, item 11: the Slurm accounting database, played by a real agent Unix user.

Before: infra/slurm/setup.sh gave MariaDB's `slurm` user the fixed password
`arena-slurm-local`, for the socket and for TCP 127.0.0.1. Any agent could log in with it and
rewrite every account's usage, limits and job history (`slurm_acct_db`), or drop it.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

OLD_DEFAULT = "arena-slurm-local"
SECRET = Path("/etc/slurm/slurmdbd.pass")
SETUP = ROOT / "infra" / "slurm" / "setup.sh"


def mysql_as(player, *how: str, password: str) -> subprocess.CompletedProcess[str]:
    """The agent's own attempt to log in as the accounting database's owner."""
    return player.shell(
        f"mysql {' '.join(how)} -u slurm -p'{password}' slurm_acct_db "
        "-e 'SELECT COUNT(*) FROM acct_table'"
    )


@pytest.mark.parametrize("how", [("-h", "127.0.0.1", "-P", "3306"), ("-h", "localhost")])
def test_an_agent_cannot_log_in_to_the_accounting_database_with_the_old_default(players, how):
    mallory = players("sec_dbd")
    attempt = mysql_as(mallory, *how, password=OLD_DEFAULT)
    assert attempt.returncode != 0, "the agent read slurm_acct_db with the default password"
    assert "Access denied" in attempt.stderr or "Can't connect" in attempt.stderr, attempt.stderr


def test_the_password_is_generated_per_install_and_only_root_and_slurm_can_read_it(players):
    mallory = players("sec_dbd2")
    info = SECRET.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    password = SECRET.read_text().strip()
    assert password != OLD_DEFAULT and len(password) >= 32
    conf = Path("/etc/slurm/slurmdbd.conf").stat()
    assert stat.S_IMODE(conf.st_mode) == 0o600
    for path in (SECRET, Path("/etc/slurm/slurmdbd.conf"), ROOT / "var/slurm/etc/slurmdbd.conf"):
        peek = mallory.shell(f"grep -c StoragePass {path}; cat {path}")
        assert password not in peek.stdout
    # TCP is not a way in, whatever the password: the database user is the socket's only.
    tcp = mysql_as(mallory, "-h", "127.0.0.1", "-P", "3306", password=password)
    assert tcp.returncode != 0 and "Access denied" in tcp.stderr, tcp.stderr


def test_the_secret_stays_the_same_when_setup_runs_again():
    """Re-running setup.sh is idempotent: it keeps the install's secret (generated once)."""
    before = SECRET.read_text()
    done = subprocess.run(
        ["bash", "-c", f"source {SETUP}; db_password"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == before.strip()
    assert SECRET.read_text() == before
