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


def mysql_as_root(*how: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mysql", *how, "-u", "slurm", f"-p{password}", "slurm_acct_db", "-e", "SELECT 1"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


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
    # TCP is not a way in, whatever the password: the database user is the socket's only. (Root
    # tries, since the agents' own TCP to MariaDB is also rejected by the firewall, item 13.)
    tcp = mysql_as_root("-h", "127.0.0.1", "-P", "3306", password=password)
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


@pytest.mark.serial  # it changes the password slurmdbd logs in with for every connection
def test_setup_migrates_an_install_that_still_has_the_old_password(players):
    """An install made before: the fixed password on the socket and a TCP user beside it."""
    mallory = players("sec_dbd3")
    old_install = (
        f"ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{OLD_DEFAULT}';"
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{OLD_DEFAULT}';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    )
    subprocess.run(["mysql"], input=old_install, text=True, check=True, timeout=30)
    try:
        assert mysql_as(mallory, "-h", "localhost", password=OLD_DEFAULT).returncode == 0
        assert mysql_as_root("-h", "127.0.0.1", password=OLD_DEFAULT).returncode == 0
    finally:
        done = subprocess.run(
            ["bash", "-c", f"source {SETUP}; ensure_database"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    attempt = mysql_as(mallory, "-h", "localhost", password=OLD_DEFAULT)
    assert attempt.returncode != 0 and "Access denied" in attempt.stderr, attempt.stderr
    attempt = mysql_as_root("-h", "127.0.0.1", password=OLD_DEFAULT)
    assert attempt.returncode != 0 and "Access denied" in attempt.stderr, attempt.stderr
    # slurmdbd still reaches its database with the install's secret.
    assert subprocess.run(["sacctmgr", "-n", "show", "cluster"], timeout=30).returncode == 0
