"""Several processes changing Slurm accounting at once: two ensuring one account (the
organizers' serving account, from two workers or two platform processes) find it there, and
that is no error; many adding accounts at once each get theirs whole, one at a time."""

import os
import subprocess
import sys

import pytest

from cluster.backends.slurm import _add_unless_there
from cluster.slurm import cli
from tests.support.workers import worker_name

pytestmark = pytest.mark.slow


def test_an_account_added_by_another_process_meanwhile_is_no_error(slurm):
    name = f"agent_{worker_name('t_race')}"
    try:
        _add_unless_there("account", name, "parent=agents", f"Description={name}")
        _add_unless_there("account", name, "parent=agents", f"Description={name}")  # again
        assert cli.sacctmgr_rows("account", ["account"], f"name={name}") == [{"account": name}]
        _add_unless_there("user", "root", f"account={name}")
        _add_unless_there("user", "root", f"account={name}")
    finally:
        cli.sacctmgr("delete", "account", name, check=False)


def test_a_refused_add_still_fails_with_slurms_words(slurm):
    with pytest.raises(cli.SlurmError, match="doesn't exist"):
        _add_unless_there("account", f"agent_{worker_name('t_orphan')}", "parent=no_such_parent")


# Each process provisions its accounts as the platform does (account_apply), as web workers
# and the phase engine do at once when a phase starts.
PROVISION = """
import sys, django
django.setup()
from cluster.backends.base import AccountLimits
from cluster.backends.slurm import SlurmBackend
slurm = SlurmBackend(partition="gpu", parent_account="agents")
limits = AccountLimits(gpu_hours=1000, max_gpus=8, max_preemptible_gpus=8, max_job_hours=24)
for account in sys.argv[1:]:
    slurm.account_apply(account=account, unix_user="root", limits=limits)
"""


def test_accounts_that_several_processes_add_at_once_are_each_whole_and_apart(slurm):
    # Without the accounting lock, four such writers lost 1 to 4 of 12 to 16 user associations
    # (each try here), nested one account's user inside another account (blocking one
    # blocked both) and once made slurmdbd exit on a MariaDB deadlock.
    groups = [[f"agent_{worker_name(f't_many{p}{i}')}" for i in range(3)] for p in range(4)]
    accounts = [account for group in groups for account in group]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "arena.settings"}
    try:
        writers = [
            subprocess.Popen([sys.executable, "-c", PROVISION, *group], env=env) for group in groups
        ]
        assert [writer.wait(timeout=240) for writer in writers] == [0] * len(writers)
        for account in accounts:
            rows = cli.sacctmgr_rows("assoc", ["account", "user"], f"account={account}")
            assert sorted(row["user"] for row in rows) == ["", "root"], account
        blocked, *others = accounts
        slurm.account_block(account=blocked, blocked=True)
        assert "MaxSubmitJobs=0(" in cli.assoc_mgr_records(blocked)["root"]
        for account in others:
            assert "MaxSubmitJobs=0(" not in cli.assoc_mgr_records(account)["root"], account
    finally:
        for account in accounts:
            cli.sacctmgr("delete", "account", account, check=False)


def test_the_accounting_lock_is_never_taken_through_a_folder_someone_else_owns(settings, tmp_path):
    foreign = tmp_path / "locks"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)  # nobody's, as an agent could have made it
    settings.CLUSTER_SLURM_ACCOUNTING_LOCK = foreign / "slurm-accounting.lock"
    with pytest.raises(cli.SlurmError, match="not this user's own"), cli.accounting_write_lock():
        pass
    assert not (foreign / "slurm-accounting.lock").exists()
