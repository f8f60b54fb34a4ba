"""The platform as the reference agent sees it: the `arena-agent` CLI that provisioning put in
its sandbox (`~/.arena/bin/arena-agent`, which reads `~/.arena/config`). Nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


class PlatformError(RuntimeError):
    """The platform refused a request; the message is the CLI's own."""


class ArenaAgent:
    def __init__(self, executable: Path | None = None, python: str = sys.executable) -> None:
        self.executable = executable or Path.home() / ".arena" / "bin" / "arena-agent"
        self.python = python

    def run(self, *args: str) -> str:
        if not self.executable.is_file():
            raise PlatformError(
                f"{self.executable} is missing: run the agent in a provisioned sandbox"
            )
        done = subprocess.run(
            [self.python, str(self.executable), *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise PlatformError(
                (done.stderr or done.stdout).strip() or f"arena-agent {args[0]} failed"
            )
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json"))

    # --- the commands the agent uses ------------------------------------------------------
    def budget(self) -> dict[str, Any]:
        return self.json("budget")

    def data_register(
        self, path: Path, *, rows: int, tokens: int, sources: list[str], licence: str, reason: str
    ) -> dict[str, Any]:
        args = ["data", "register", str(path), "--rows", str(rows), "--tokens", str(tokens)]
        for source in sources:
            args += ["--source", source]
        return self.json(*args, "--licence", licence, "--reason", reason)

    def submit(
        self, script: Path, *, name: str, minutes: int, gpus: int, nodes: int, workdir: Path
    ) -> dict[str, Any]:
        return self.json(
            "submit", str(script), "--name", name, "--time", str(minutes), "--gpus", str(gpus),
            "--nodes", str(nodes), "--workdir", str(workdir),
        )  # fmt: skip

    def job(self, job_id: str) -> dict[str, Any]:
        return self.json("job", job_id)

    def checkpoint_register(
        self, path: Path, *, job: str, data: list[int], parent: int | None
    ) -> dict[str, Any]:
        args = ["checkpoints", "register", str(path), "--job", job]
        for record in data:
            args += ["--data", str(record)]
        if parent is not None:
            args += ["--parent", str(parent)]
        return self.json(*args)

    def checkpoints(self) -> list[dict[str, Any]]:
        return self.json("checkpoints", "list")["checkpoints"]

    def data_records(self) -> list[dict[str, Any]]:
        return self.json("data", "list")["data"]

    def nominate(self, checkpoint: int, card: Path) -> str:
        return self.run("nominate", str(checkpoint), "--card", str(card)).strip()

    def nominations(self) -> list[dict[str, Any]]:
        return self.json("nominations")["nominations"]

    def votes_export(self, output: Path, *, phase: str | None) -> None:
        self.run("votes", "export", "--output", str(output), *(["--phase", phase] if phase else []))
