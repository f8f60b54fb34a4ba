"""`python manage.py competition apply FILE [--dry-run] [--provision]` and `competition show
[--json] [NAME]`: a competition as a file (arena/phases/competition_file.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.sandboxes import UnixSandboxes
from agents.services import agent_provision
from arena.competition.models import Competition
from arena.competition.selectors import competition_current
from arena.phases.competition_file import (
    CompetitionFileError,
    competition_agents_unprovisioned,
    competition_apply,
    competition_diff,
    competition_file_load,
    competition_show,
)


class Command(BaseCommand):
    help = (
        "A competition as a TOML or YAML file. `apply FILE`: validate it, print what would"
        " change, and apply it (all or nothing; again changes nothing). `show [NAME]`: the plan."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        apply = actions.add_parser("apply", help="validate, show the changes, apply them")
        apply.add_argument("file", type=Path)
        apply.add_argument("--dry-run", action="store_true", help="show the changes only")
        apply.add_argument(
            "--provision",
            action="store_true",
            help="also provision the declared agents not provisioned yet (as root)",
        )
        show = actions.add_parser("show", help="the competition's plan")
        show.add_argument("name", nargs="?", help="default: the current competition")
        show.add_argument("--json", action="store_true")

    def handle(self, *args: object, **options: Any) -> None:
        if options["action"] == "apply":
            self._apply(options["file"], dry_run=options["dry_run"], provision=options["provision"])
        else:
            self._show(options["name"], as_json=options["json"])

    def _apply(self, path: Path, *, dry_run: bool, provision: bool) -> None:
        if provision and os.geteuid() != 0:
            raise CommandError("--provision makes Unix users: run it as root")
        try:
            spec = competition_file_load(path)
            changes = competition_diff(spec)
        except OSError as error:
            raise CommandError(f"{path}: {error.strerror}") from None
        except CompetitionFileError as error:
            raise CommandError(self._errors(path, error)) from None
        for change in changes:
            self.stdout.write(f"  {change}")
        if not changes:
            self.stdout.write(f"{spec.name}: nothing to change")
        refused = [change for change in changes if change.refused]
        if refused:
            raise CommandError(f"{len(refused)} change(s) refused: nothing was applied")
        if dry_run:
            self.stdout.write(f"dry run: {len(changes)} change(s), none applied")
            return
        try:
            competition_apply(spec)
        except CompetitionFileError as error:  # the database moved since the diff
            raise CommandError(self._errors(path, error)) from None
        if changes:
            self.stdout.write(self.style.SUCCESS(f"{spec.name}: {len(changes)} change(s) applied"))
        competition = Competition.objects.get(name=spec.name)
        missing = competition_agents_unprovisioned(competition)
        if missing and provision:
            sandboxes = UnixSandboxes(settings.AGENTS_SANDBOX_ROOT)
            for name in missing:
                try:
                    made = agent_provision(name=name, sandboxes=sandboxes)
                except Exception as error:  # one agent's failure does not stop the others
                    self.stderr.write(f"provisioning {name} failed: {error}")
                    continue
                self.stdout.write(f"provisioned {name}: sandbox {made.agent.sandbox}")
            for change in competition_apply(spec):  # their scaffold budgets, now they exist
                self.stdout.write(f"  {change}")
            missing = competition_agents_unprovisioned(competition)
        if missing:
            self.stdout.write(
                f"not provisioned yet: {', '.join(missing)} (`agents provision NAME`, then apply"
                " the file again to set their scaffold budgets; or apply with --provision)"
            )
            if provision:
                raise CommandError(f"{len(missing)} agent(s) could not be provisioned")

    @staticmethod
    def _errors(path: Path, error: CompetitionFileError) -> str:
        lines = "\n".join(f"  {line}" for line in error.errors)
        return f"{path}: {len(error.errors)} error(s), nothing applied:\n{lines}"

    def _show(self, name: str | None, *, as_json: bool) -> None:
        competition = (
            Competition.objects.filter(name=name).first() if name else competition_current()
        )
        if competition is None:
            raise CommandError(f"no competition named {name!r}" if name else "no competition yet")
        plan = competition_show(competition)
        if as_json:
            self.stdout.write(json.dumps(plan, indent=2))
            return
        write = self.stdout.write
        write(f"competition {plan['name']}")
        write(f"  base model      {plan['base_model']}")
        write(f"  instruct model  {plan['instruct_model'] or '(none)'}")
        delay = plan["live_public_delay_minutes"]
        write(f"  public live     {'off' if delay is None else f'{delay} min late'}")
        write("agents")
        for agent in plan["agents"]:
            write(
                f"  {agent['name']:<16} harness {agent['harness']:<8}"
                f" model {agent['model'] or '-':<20} scaffold ${agent['scaffold_budget_usd']}"
                f"{'' if agent['provisioned'] else '  (not provisioned)'}"
            )
            if agent["command"]:
                write(f"  {'':<16} command {json.dumps(agent['command'])}")
        write("phases")
        for phase in plan["phases"]:
            write(
                f"  {phase['number']} {phase['label']:<10} {phase['state']:<9}"
                f" {phase['starts_at']} -> {phase['ends_at']},"
                f" arena closes {phase['arena_closes_at'] or 'when the next phase starts'},"
                f" feedback {phase['feedback']}"
            )
            write(
                f"    {phase['gpu_hours']} GPU-h, {phase['max_gpus']}+{phase['max_preemptible_gpus']}"
                f" preemptible GPUs, {phase['max_job_hours']} h/job, {phase['storage_gib']} GiB,"
                f" ${phase['api_credit_usd']} API credit"
            )
        which = "declared" if plan["benchmarks_declared"] else "all of the registry"
        write(f"benchmarks ({which}): {', '.join(plan['benchmarks'])}")
        write("arena")
        for key, setting in plan["arena"].items():
            write(f"  {key:<26} {setting['value']}  ({setting['from']})")
