"""Issue 12, items 1 and 2: whatever an agent plants in its sandbox — a link, a FIFO, a hard
link, a sparse terabyte, a folder a thousand deep — root never follows it, never reads past a
bound, and never writes or creates anything outside the sandbox because of it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agents.models import Checkpoint, DataRecord, Nomination
from agents.reference.install import reference_agent_install
from agents.services import RegistrationRefused, checkpoint_register, data_register
from cluster.models import ClusterAccount, Job
from cluster.selectors import job_output
from cluster.services import storage_measure
from evalsuite.registry import EvalItem
from safety.models import Finding
from safety.services import audit_run
from tests import factories
from tests.security.conftest import CANARY_TEXT, Player, assert_canary_untouched, bounded

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GIB = 1024**3


def job_writing_to(player: Player, workdir: Path, number: int) -> Job:
    """A finished job of the agent's whose output file is `workdir/slurm-<id>.out`."""
    scheduler_id = f"{90000 + number}"
    return Job.objects.create(
        account=ClusterAccount.objects.get(name=player.provisioned.agent.cluster_account),
        period="phase-1", backend="slurm", scheduler_id=scheduler_id, name="train", qos="normal",
        nodes=1, gpus=1, time_limit_minutes=10, workdir=str(workdir), script="",
        stdout_path=str(workdir / f"slurm-{scheduler_id}.out"), state=Job.State.COMPLETED,
    )  # fmt: skip


# --- writes into a sandbox (feedback, config) --------------------------------------------------


def test_a_planted_tmp_link_is_replaced_and_never_written_through(players, sandboxes, canary):
    ann = players("sec_links_a")
    ann.attack(
        f"mkdir -p ~/feedback/phase-1 && ln -s {canary} ~/feedback/phase-1/battles.jsonl.tmp"
        f" && ln -s {canary} ~/feedback/phase-1/leaderboard.json"
    )
    battles = ann.home / "feedback" / "phase-1" / "battles.jsonl"
    leaderboard = battles.with_name("leaderboard.json")

    sandboxes.write_private(ann.user, battles, '{"battle": 1}\n')
    sandboxes.write_private(ann.user, leaderboard, "{}\n")

    assert_canary_untouched(canary)
    for path, text in ((battles, '{"battle": 1}\n'), (leaderboard, "{}\n")):
        info = path.lstat()
        assert not path.is_symlink() and path.read_text() == text
        assert (info.st_uid, info.st_mode & 0o777) == (ann.uid, 0o600)


def test_a_dangling_tmp_link_does_not_make_root_create_its_target(players, sandboxes, exposed):
    ann = players("sec_links_a")
    target = exposed / "ld.so.preload"  # stands for /etc/ld.so.preload
    ann.attack(f"mkdir -p ~/feedback/phase-1 && ln -s {target} ~/feedback/phase-1/README.md.tmp")

    sandboxes.write_private(ann.user, ann.home / "feedback" / "phase-1" / "README.md", "# hi\n")

    assert not target.exists()
    assert (ann.home / "feedback" / "phase-1" / "README.md").read_text() == "# hi\n"


def test_a_folder_swapped_for_a_link_stops_the_write_outside(players, sandboxes, exposed):
    ann = players("sec_links_a")
    victim = exposed / "victim"  # a root folder, as /etc would be
    victim.mkdir()
    ann.attack(f"rm -rf ~/feedback && ln -s {victim} ~/feedback")

    with pytest.raises(OSError, match="symbolic link"):
        sandboxes.write_private(ann.user, ann.home / "feedback" / "phase-1" / "x.json", "{}")

    assert list(victim.iterdir()) == []
    assert victim.stat().st_uid == 0


# --- job output ---------------------------------------------------------------------------------


def test_job_output_linked_to_another_agents_config_shows_none_of_it(players):
    ann, ben = players("sec_links_a"), players("sec_links_b")
    job = job_writing_to(ann, ann.home, 1)
    ann.attack(f"ln -sf {ben.provisioned.config_path} ~/slurm-{job.scheduler_id}.out")

    with bounded():
        output = job_output(job)

    assert ben.provisioned.api_token not in output and "ARENA_TOKEN" not in output
    assert "symbolic link" in output


def test_job_output_linked_to_a_root_only_file_shows_none_of_it(players, canary):
    ann = players("sec_links_a")
    job = job_writing_to(ann, ann.home, 2)
    ann.attack(f"ln -sf {canary} ~/slurm-{job.scheduler_id}.out")

    with bounded():
        output = job_output(job)

    assert "root's secret" not in output and "symbolic link" in output


def test_job_output_linked_to_dev_zero_returns_at_once(players):
    ann = players("sec_links_a")
    job = job_writing_to(ann, ann.home, 3)
    ann.attack(f"ln -sf /dev/zero ~/slurm-{job.scheduler_id}.out")

    with bounded(seconds=10, memory_mib=512):
        output = job_output(job)

    assert len(output) < 1000 and "symbolic link" in output


def test_job_output_that_is_a_fifo_returns_at_once_with_the_reason(players):
    ann = players("sec_links_a")
    job = job_writing_to(ann, ann.home, 4)
    ann.attack(f"mkfifo ~/slurm-{job.scheduler_id}.out")

    started = time.monotonic()
    with bounded(seconds=10):
        output = job_output(job)

    assert time.monotonic() - started < 5
    assert "FIFO" in output


def test_job_output_in_a_workdir_swapped_for_a_link_is_refused(players, exposed):
    ann = players("sec_links_a")
    elsewhere = exposed / "secrets"  # a root folder whose files the agent cannot read
    elsewhere.mkdir(mode=0o711)
    job = job_writing_to(ann, ann.home / "runs", 5)
    (elsewhere / f"slurm-{job.scheduler_id}.out").write_text(CANARY_TEXT)
    ann.attack(f"ln -s {elsewhere} ~/runs")

    with bounded():
        output = job_output(job)

    assert "root's secret" not in output and "symbolic link" in output


def test_job_output_hard_linked_to_a_root_file_is_refused(players, canary):
    ann = players("sec_links_a")
    job = job_writing_to(ann, ann.home, 6)
    output_file = ann.home / f"slurm-{job.scheduler_id}.out"
    tried = ann.shell(f"ln {canary} {output_file}")
    if tried.returncode != 0:
        # fs.protected_hardlinks=1 stops the agent here; where it is 0 the link is made. Make
        # it as the kernel would then, and check the platform holds on its own.
        assert "Operation not permitted" in tried.stderr, tried.stderr
        os.link(canary, output_file)

    with bounded():
        output = job_output(job)

    assert "root's secret" not in output and "hard link" in output


def test_job_output_shows_the_tail_of_a_real_output_file(players):
    ann = players("sec_links_a")
    job = job_writing_to(ann, ann.home, 7)
    ann.attack(f"seq 1 100000 > ~/slurm-{job.scheduler_id}.out")

    output = job_output(job, tail_bytes=20)

    assert output.endswith("99999\n100000\n") and len(output) == 20


# --- registration -------------------------------------------------------------------------------


def register(player: Player, path: str) -> DataRecord:
    return data_register(
        agent=player.provisioned.agent, path=path, rows=1, tokens=1, sources=["generated:own"],
        licence="CC0", reason="training",
    )  # fmt: skip


def test_a_data_folder_holding_a_link_out_of_the_sandbox_is_refused(players, canary):
    ann = players("sec_links_a")
    ann.attack(f"mkdir ~/data && echo '{{}}' > ~/data/a.jsonl && ln -s {canary} ~/data/b.jsonl")

    with bounded(), pytest.raises(RegistrationRefused, match="symbolic link"):
        register(ann, "data")

    assert not DataRecord.objects.exists()


def test_a_data_file_hard_linked_to_a_root_file_is_refused(players, canary):
    ann = players("sec_links_a")
    os.link(canary, ann.home / "stolen.jsonl")  # what protected_hardlinks=0 would let it do

    with bounded(), pytest.raises(RegistrationRefused, match="hard link"):
        register(ann, "stolen.jsonl")


def test_a_data_path_through_a_linked_folder_is_refused(players):
    ann, ben = players("sec_links_a"), players("sec_links_b")
    ben.attack("mkdir ~/data && echo '{}' > ~/data/train.jsonl")
    # ann points a folder of hers at ben's; only root could follow it
    ann.attack(f"ln -s {ben.home}/data ~/borrowed")

    with bounded(), pytest.raises(RegistrationRefused, match="symbolic link|outside"):
        register(ann, f"{ann.home}/borrowed/train.jsonl")


def test_a_checkpoint_whose_weights_link_to_a_rivals_file_is_refused(players):
    ann, ben = players("sec_links_a"), players("sec_links_b")
    ben.attack("mkdir ~/ckpt && echo weights > ~/ckpt/model.safetensors")
    ann.attack(
        'mkdir ~/ckpt && echo \'{"model_type": "llama"}\' > ~/ckpt/config.json'
        f" && ln -s {ben.home}/ckpt/model.safetensors ~/ckpt/model.safetensors"
    )
    job = job_writing_to(ann, ann.home, 8)

    with bounded(), pytest.raises(RegistrationRefused, match="symbolic link"):
        checkpoint_register(
            agent=ann.provisioned.agent, path="ckpt", job_id=job.scheduler_id, data_record_ids=[]
        )
    assert not Checkpoint.objects.exists()


# --- the audit and the storage measurement --------------------------------------------------------


SECRET_ITEM = EvalItem(
    "held-out-qa",
    "hq-1",
    "Which lighthouse keeper of the Varnish Isles first logged the green comet in his diary?",
    "Old Tobiah Grell logged it from the Northmost light on a winter night.",
    held_out=True,
)


def test_the_audit_reads_no_link_fifo_or_dev_zero_in_a_checkpoint(players, exposed):
    ann = players("sec_links_a")
    # A root-only file holding a held-out item, as the platform's evaluation data would.
    secret = exposed / "held-out.jinja"
    secret.write_text(f"{{# {SECRET_ITEM.prompt} #}}\n{{# {SECRET_ITEM.answer} #}}\n")
    secret.chmod(0o600)
    ann.attack(
        "mkdir ~/ckpt && echo '{}' > ~/ckpt/config.json"
        " && ln -s /dev/zero ~/ckpt/trainer_state.json"
        f" && ln -s {secret} ~/ckpt/chat_template.jinja"
        " && mkfifo ~/ckpt/tokenizer_config.json"
        " && mkfifo ~/notes.txt && ln -s /dev/zero ~/zeros.jsonl"
    )
    checkpoint = Checkpoint.objects.create(
        agent=ann.provisioned.agent, path=str(ann.home / "ckpt"), job=job_writing_to(ann, ann.home, 9),
        architecture="LlamaForCausalLM", parameters=1, end_of_turn_token="<|im_end|>",
        weights_sha256="0" * 64,
    )  # fmt: skip
    phase = factories.running_phase(name="security")
    fields = {"training_method": "SFT", "steps": 1, "gpu_hours": 1.0, "hardware": "1 GPU",
              "datasets": ["own"]}  # fmt: skip
    Nomination.objects.create(
        agent=ann.provisioned.agent, phase=phase, checkpoint=checkpoint,
        model_card="---\n" + json.dumps(fields) + "\n---\n", card_fields=fields,
    )  # fmt: skip

    with bounded(seconds=60, memory_mib=1024):
        report = audit_run(agent_names=[ann.provisioned.agent.name], items=[SECRET_ITEM])

    findings = json.dumps([[f.summary, f.evidence] for f in report.created])
    assert "lighthouse" not in findings and "Tobiah" not in findings
    assert not Finding.objects.filter(kind=Finding.Kind.HARDCODED_OUTPUT).exists()


def test_storage_counts_blocks_never_follows_links_and_survives_a_deep_tree(players):
    ann = players("sec_links_a")
    ann.attack(
        "truncate -s 1T ~/sparse.bin && ln -s / ~/everything && mkfifo ~/pipe"
        " && head -c 4194304 /dev/urandom > ~/real.bin"
        # past PATH_MAX (4096 bytes): `cd` in a shell refuses, chdir one level at a time does not
        ' && python3 -c \'import os\nfor _ in range(2100): os.mkdir("d"); os.chdir("d")\n'
        'open("deep.bin", "wb").write(os.urandom(8 << 20))\''
    )
    account = ClusterAccount.objects.get(name=ann.provisioned.agent.cluster_account)

    with bounded(seconds=60):
        used = storage_measure(account=account, path=ann.home)

    # 4 MiB + 8 MiB of data, the folders and the CLI: the deep file counts, the sparse
    # terabyte counts what it uses, `/` behind the link not at all.
    assert 12 * 1024**2 <= used < 24 * 1024**2


# --- the reference agent's install ---------------------------------------------------------------


def test_the_reference_install_meets_a_planted_link_and_touches_nothing_outside(players, tmp_path):
    ann = players("sec_links_a")
    victim = tmp_path / "victim"
    victim.mkdir()
    ann.attack(f"mkdir ~/reference-agent && ln -s {victim} ~/reference-agent/agents")

    with pytest.raises(OSError, match="symbolic link"):
        reference_agent_install(ann.home, ann.user)

    assert list(victim.iterdir()) == [] and victim.stat().st_uid == 0


def test_the_reference_install_gives_the_agent_its_own_private_copy(players):
    ann = players("sec_links_a")
    ann.attack(
        "mkdir -p ~/reference-agent/agents/reference"
        " && echo stale > ~/reference-agent/agents/reference/old.py"
    )

    root = reference_agent_install(ann.home, ann.user)

    package = root / "agents" / "reference"
    assert (package / "cli.py").is_file() and not (package / "old.py").exists()
    for path in [package, *package.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == ann.uid
        assert info.st_mode & 0o777 == (0o700 if path.is_dir() else 0o600)
