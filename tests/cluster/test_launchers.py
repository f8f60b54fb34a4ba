"""sbatch launch templates: golden files, argument validation, and quoting checked by running
the rendered script under bash with stand-ins for srun, scontrol and python (no Slurm needed).

Regenerate the golden files after an intended template change with
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cluster/test_launchers.py`, then review the diff.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster.launchers.render import KINDS, render_launcher, zero_config

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"

FIXED: dict[str, Any] = {
    "job_name": "sft-tiny",
    "account": "agents",
    "qos": "normal",
    "nodes": 2,
    "gpus_per_node": 4,
    "time_limit_minutes": 90,
    "workdir": Path("/srv/arena/runs/42"),
    "command": [
        "-m",
        "cluster.training.sft_fsdp2",
        "--model",
        "/srv/arena/models/base",
        "--out",
        "/srv/arena/runs/42/checkpoint",
        "--steps",
        "100",
    ],
    "env": {"HF_HUB_OFFLINE": "1", "PYTHONPATH": "/srv/arena/src"},
    "python": "/srv/arena/venv/bin/python",
}

HOSTILE_ARGS = [
    "; touch pwned-semicolon",
    "$(touch pwned-subshell)",
    "`touch pwned-backtick`",
    'it\'s "quoted" \\ back',
    "two\nlines",
    "*",
    "$HOME ${PATH} $1 $@",
    "' ; touch pwned-quote ; '",
    "",
]
HOSTILE_ENV = "x'; touch pwned-env; echo '$(touch pwned-env2)\nnext line"


def kwargs(**overrides: Any) -> dict[str, Any]:
    return {**FIXED, **overrides}


def fixed(kind: str) -> dict[str, Any]:
    """FIXED, with the entry point that takes the kind's arguments."""
    if kind != "deepspeed_zero":
        return FIXED
    command = ["-m", "cluster.training.sft_deepspeed", *FIXED["command"][2:]]
    return {**FIXED, "command": command}


# --- golden files ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rendered_script_matches_golden_file(kind: str) -> None:
    text = render_launcher(kind, **fixed(kind))  # type: ignore[arg-type]
    golden = GOLDEN_DIR / f"{kind}.sbatch"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.is_file(), f"missing {golden}: run with UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8"), (
        f"{kind} rendering changed; if intended, regenerate with UPDATE_GOLDEN=1 and review"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_rendered_script_essentials(kind: str) -> None:
    text = render_launcher(kind, **fixed(kind))  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    sbatch = [line for line in lines if line.startswith("#SBATCH ")]
    assert sbatch == [
        "#SBATCH --job-name=sft-tiny",
        "#SBATCH --account=agents",
        "#SBATCH --qos=normal",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --time=90",
        "#SBATCH --chdir=/srv/arena/runs/42",
        "#SBATCH --output=slurm-%j.out",
        "#SBATCH --requeue",
    ]
    # sbatch stops reading directives at the first command: all of them come before it.
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert max(lines.index(s) for s in sbatch) < first_command
    assert lines[first_command] == "set -euo pipefail"
    assert "--nproc_per_node=4" in text and "--rdzv_backend=c10d" in text
    assert '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"' in text
    assert "export PYTHONPATH=/srv/arena/src" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"nodes": 0}, "nodes must be >= 1"),
        ({"gpus_per_node": 0}, "gpus_per_node must be >= 1"),
        ({"time_limit_minutes": 0}, "time_limit_minutes must be >= 1"),
        ({"nodes": 2.0}, "nodes must be an integer"),
        ({"nodes": True}, "nodes must be an integer"),
        ({"command": []}, "command must be a non-empty list"),
        ({"command": "python train.py"}, "command must be a non-empty list"),
        ({"command": ["-m", 3]}, r"command\[1\] must be a string"),
        ({"job_name": "my job"}, "job_name must not contain whitespace"),
        ({"job_name": "job\n#SBATCH --qos=high"}, "job_name must not contain whitespace"),
        ({"job_name": ""}, "job_name must be a non-empty string"),
        ({"account": "agents;rm"}, "account 'agents;rm' has characters"),
        ({"qos": "normal\t"}, "qos must not contain whitespace"),
        ({"output": "out\nfile"}, "output must not contain whitespace"),
        ({"workdir": Path("relative/dir")}, "workdir must be an absolute path"),
        ({"workdir": Path("/srv/my runs")}, "workdir must not contain whitespace"),
        ({"env": {"BAD-NAME": "1"}}, "not a valid shell variable name"),
        ({"env": {"MASTER_PORT": "1234"}}, "set by the launcher itself"),
        ({"env": {"X": 1}}, r"env\['X'\] must be a string"),
        ({"python": ""}, "python must be a non-empty path"),
    ],
)
def test_invalid_arguments_raise_value_error(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_launcher("torchrun_fsdp2", **kwargs(**overrides))


def test_unknown_kind_and_zero_stage() -> None:
    with pytest.raises(ValueError, match="unknown launcher kind"):
        render_launcher("mpirun", **FIXED)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="zero_stage must be 1, 2 or 3"):
        render_launcher("deepspeed_zero", zero_stage=4, **fixed("deepspeed_zero"))
    with pytest.raises(ValueError, match="takes no DeepSpeed options"):
        render_launcher("deepspeed_zero", **FIXED)


# --- quoting, end to end under bash ----------------------------------------------------------


def _executable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class FakeCluster:
    """Stand-ins on PATH: srun runs its task as node 0, scontrol reports nodes n1, n2 with the
    given NodeAddr, and a fake python records its argv and environment."""

    def __init__(self, tmp_path: Path, node_addr: str) -> None:
        self.root = tmp_path
        self.workdir = tmp_path / "work"
        self.workdir.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.record = tmp_path / "record.json"
        _executable(
            self.bin / "srun",
            '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_NODEID=0 exec "$@"\n',
        )
        _executable(
            self.bin / "scontrol",
            "#!/bin/bash\n"
            'if [[ "$2" == hostnames ]]; then printf "n1\\nn2\\n"; exit 0; fi\n'
            'echo "NodeName=$3 Arch=x86_64 CoresPerSocket=1"\n'
            f'echo "   NodeAddr={node_addr} NodeHostName={node_addr} Port=17001"\n',
        )
        self.python = self.bin / "fake-python"
        _executable(
            self.python,
            "#!/usr/bin/env python3\n"
            "import json, os, sys\n"
            f"with open({str(self.record)!r}, 'w') as f:\n"
            "    json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, f)\n",
        )

    def run(self, script: str) -> tuple[list[str], dict[str, str]]:
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": str(self.root),
            "SLURM_JOB_ID": "123",
            "SLURM_NNODES": "2",
            "SLURM_JOB_NODELIST": "n[1-2]",
        }
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(self.record.read_text())
        return data["argv"], data["env"]


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_command_and_env_reach_the_script_verbatim(kind: str, tmp_path: Path) -> None:
    fake = FakeCluster(tmp_path, node_addr="localhost")
    workdir = fake.workdir
    command = ["train.py", *HOSTILE_ARGS]
    text = render_launcher(
        kind,  # type: ignore[arg-type]
        **kwargs(
            workdir=workdir,
            nodes=2,
            gpus_per_node=1,
            command=command,
            env={"HOSTILE": HOSTILE_ENV, "PYTHONPATH": "/srv/arena/src"},
            python=str(fake.python),
        ),
    )
    argv, env = fake.run(text)

    launcher = [
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--node_rank=0",
        "--rdzv_id=123",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=localhost:10123",  # NodeAddr resolves; port 10000 + job id
    ]
    assert argv[: len(launcher)] == launcher
    rest = argv[len(launcher) :]
    if kind == "deepspeed_zero":
        config = workdir / "ds_zero2_123.json"
        assert rest[-3:] == ["--deepspeed", "--deepspeed_config", str(config)]
        assert json.loads(config.read_text()) == zero_config(2)
        assert env["DS_CONFIG"] == str(config)
        rest = rest[:-3]
    assert rest == command
    assert env["HOSTILE"] == HOSTILE_ENV
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("localhost", "10123")
    assert not list(tmp_path.rglob("pwned*")), "an interpolated value was executed"


def test_unresolvable_node_address_falls_back_to_loopback(tmp_path: Path) -> None:
    fake = FakeCluster(tmp_path, node_addr="no-such-node.invalid")
    text = render_launcher(
        "torchrun_fsdp2",
        **kwargs(workdir=fake.workdir, gpus_per_node=1, python=str(fake.python)),
    )
    argv, env = fake.run(text)
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert "--rdzv_endpoint=127.0.0.1:10123" in argv


def test_the_deepspeed_entry_point_takes_what_its_launcher_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster.training import sft_deepspeed, sft_fsdp2

    fake = FakeCluster(tmp_path, node_addr="localhost")
    text = render_launcher(
        "deepspeed_zero",
        **{
            **fixed("deepspeed_zero"),
            "workdir": fake.workdir,
            "gpus_per_node": 1,
            "python": str(fake.python),
        },
    )
    argv, _ = fake.run(text)
    script_args = argv[argv.index("cluster.training.sft_deepspeed") + 1 :]
    args = sft_deepspeed.parse_args(script_args)
    assert args.deepspeed and args.deepspeed_config == str(fake.workdir / "ds_zero2_123.json")
    assert args.steps == 100 and str(args.model) == "/srv/arena/models/base"
    with pytest.raises(SystemExit):  # what the DeepSpeed template used to launch
        sft_fsdp2.parse_args(script_args)
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as where DeepSpeed is not installed
    with pytest.raises(SystemExit, match="DeepSpeed is not installed"):
        sft_deepspeed.main(script_args)


def test_deepspeed_buckets_left_out_or_auto_are_sized_from_the_hidden_size():
    from cluster.training.sft_deepspeed import size_buckets

    config = zero_config(3)
    config["zero_optimization"]["stage3_prefetch_bucket_size"] = "auto"
    sized = size_buckets(config, hidden_size=128)
    assert sized == {
        "reduce_bucket_size": 128 * 128,
        "stage3_prefetch_bucket_size": int(0.9 * 128 * 128),
        "stage3_param_persistence_threshold": 1280,
    }
    assert config["zero_optimization"]["reduce_bucket_size"] == 16384


def test_deepspeed_buckets_the_config_gives_are_kept():
    from cluster.training.sft_deepspeed import size_buckets

    config = zero_config(2)
    config["zero_optimization"]["reduce_bucket_size"] = 500_000_000
    assert size_buckets(config, hidden_size=128) == {}
    assert config["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    # ZeRO-2 has no stage-3 buckets to size.
    assert "stage3_prefetch_bucket_size" not in config["zero_optimization"]
