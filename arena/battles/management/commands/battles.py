from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.battles.categorize import (
    battles_categorize,
    category_judge_from_settings,
    prompt_groups_refresh,
)
from arena.battles.export import battle_export_rows, write_battle_export
from arena.battles.selectors import default_prompts
from arena.battles.services import prompts_load, targeted_round_schedule
from arena.leaderboard.rounds import (
    ROUND_BOOTSTRAP_ROUNDS,
    round_report_lines,
    targeted_round_results,
)
from arena.leaderboard.signals import inputs_generation_bump
from arena.serving.models import Contestant


class Command(BaseCommand):
    help = (
        "Battles: export counted votes in the battle export format; load suggested prompts;"
        " schedule a targeted round between two contestants; categorize prompts (rules, an"
        " optional judge) and group near-duplicate prompts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="write counted battles as JSONL (DESIGN.md §5)")
        export.add_argument("--out", required=True, type=Path, help="output file (.jsonl)")
        export.add_argument("--phase", help="only this phase's battles")
        target = actions.add_parser(
            "target",
            help="serve N battles between two contestants before any random pair;"
            " --report: every round's result",
        )
        target.add_argument("model_a", nargs="?", help="a contestant's display name")
        target.add_argument("model_b", nargs="?", help="another contestant's display name")
        target.add_argument("--battles", type=int, help="how many (needed to schedule)")
        target.add_argument(
            "--prompts", type=Path, help="only these prompts, one per line (suggested first)"
        )
        target.add_argument("--note", default="")
        target.add_argument(
            "--report",
            action="store_true",
            help="print each round's tally and its own fit, raw and style-controlled",
        )
        target.add_argument("--json", action="store_true", help="with --report: one JSON object")
        target.add_argument("--bootstrap", type=int, default=ROUND_BOOTSTRAP_ROUNDS)
        target.add_argument("--seed", type=int, default=0)
        categorize = actions.add_parser(
            "categorize",
            help="tag battles stored without categories by the rules; with --judge, ask the"
            " category judge (hard prompts by Arena-Hard's 7 criteria, creative writing) about"
            " every battle it has not read; then group near-duplicate prompts for the fit",
        )
        categorize.add_argument(
            "--judge",
            action="store_true",
            help="ask the judge (ARENA_CATEGORY_JUDGE_MODEL, through the API proxy by default)",
        )
        categorize.add_argument("--model", help="the judge's model (default: the setting)")
        categorize.add_argument("--base-url", help="an OpenAI-compatible base URL")
        categorize.add_argument(
            "--api-key-env",
            metavar="NAME",
            help="the environment variable holding the judge's API key",
        )
        categorize.add_argument("--limit", type=int, help="at most this many battles")
        categorize.add_argument(
            "--no-regroup", action="store_true", help="skip the near-duplicate grouping"
        )
        prompts = actions.add_parser("prompts", help="manage the suggested-prompt pool")
        prompts_actions = prompts.add_subparsers(dest="prompts_action", required=True)
        load = prompts_actions.add_parser("load", help="add prompts, one per line")
        load.add_argument("file", nargs="?", type=Path, help="default: the shipped prompt list")

    def handle(self, *args: object, **options: object) -> None:
        if options["action"] == "export":
            out = options["out"]
            assert isinstance(out, Path)
            if not out.parent.exists():
                raise CommandError(f"{out.parent} does not exist")
            phase = options["phase"]
            assert phase is None or isinstance(phase, str)
            count = write_battle_export(battle_export_rows(phase=phase), out)
            self.stdout.write(f"wrote {count} counted battles to {out}")
        elif options["action"] == "categorize":
            self._categorize(options)
        elif options["action"] == "target" and options["report"]:
            self._report(options)
        elif options["action"] == "target":
            self._target(options)
        else:
            source = options["file"]
            if source is None:
                texts = default_prompts()
            else:
                assert isinstance(source, Path)
                if not source.is_file():
                    raise CommandError(f"{source} is not a file")
                texts = source.read_text(encoding="utf-8").splitlines()
            added = prompts_load(texts=texts)
            self.stdout.write(f"added {added} new prompts to the pool")

    def _report(self, options: dict[str, object]) -> None:
        if options["model_a"] or options["model_b"] or options["battles"] is not None:
            raise CommandError("--report takes no contestants and no --battles")
        rounds, seed = options["bootstrap"], options["seed"]
        assert isinstance(rounds, int) and isinstance(seed, int)
        if rounds < 1:
            raise CommandError("--bootstrap needs at least one round")
        results = targeted_round_results(bootstrap_rounds=rounds, seed=seed)
        if options["json"]:
            self.stdout.write(json.dumps({"rounds": [r.to_json() for r in results]}, indent=2))
            return
        if not results:
            self.stdout.write("no targeted rounds yet")
        for result in results:
            self.stdout.write("\n".join(round_report_lines(result)) + "\n")

    def _categorize(self, options: dict[str, Any]) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        report = battles_categorize(limit=limit)
        self.stdout.write(f"tagged {report.categorized} battles by the rules")
        if options["judge"]:
            api_key = None
            if options["api_key_env"]:
                api_key = os.environ.get(options["api_key_env"])
                if not api_key:
                    raise CommandError(f"${options['api_key_env']} is not set")
            judge = category_judge_from_settings(
                model=options["model"], base_url=options["base_url"], api_key=api_key
            )
            if judge is None:
                raise CommandError(
                    "no category judge: set ARENA_CATEGORY_JUDGE_MODEL or pass --model"
                )
            report = battles_categorize(categorizer=judge, limit=limit)
            self.stdout.write(
                f"the judge ({judge.name}) categorized {report.categorized} battles;"
                f" {report.failed} failed"
            )
            for error in report.errors:
                self.stderr.write(self.style.WARNING(error))
        if not options["no_regroup"]:
            groups = prompt_groups_refresh()
            self.stdout.write(
                f"grouped {groups['battles']} prompts into {groups['groups']} groups"
                f" ({groups['battles_in_groups_of_several']} in groups of several);"
                f" {groups['updated']} battles changed group"
            )
            if groups["updated"]:
                # The live board's kept inputs hold each vote's group: read them all again.
                inputs_generation_bump()

    def _target(self, options: dict[str, object]) -> None:
        if options["json"]:
            raise CommandError("--json goes with --report")
        if not (options["model_a"] and options["model_b"]) or options["battles"] is None:
            raise CommandError("scheduling a round needs two contestants and --battles")
        pair = []
        for name in (options["model_a"], options["model_b"]):
            contestant = Contestant.objects.filter(display_name=name).first()
            if contestant is None:
                known = ", ".join(Contestant.objects.values_list("display_name", flat=True))
                raise CommandError(f"no contestant named {name!r} (known: {known or 'none'})")
            pair.append(contestant)
        prompts_file = options["prompts"]
        prompts = None
        if prompts_file is not None:
            assert isinstance(prompts_file, Path)
            if not prompts_file.is_file():
                raise CommandError(f"{prompts_file} is not a file")
            prompts = [
                p for p in prompts_file.read_text(encoding="utf-8").splitlines() if p.strip()
            ]
        battles = options["battles"]
        assert isinstance(battles, int)
        try:
            scheduled = targeted_round_schedule(
                contestant_a=pair[0],
                contestant_b=pair[1],
                battles=battles,
                prompts=prompts,
                note=str(options["note"]),
            )
        except ValueError as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(
            f"{scheduled.tag}: {battles} battles of {pair[0]} vs {pair[1]}"
            + (f" on {len(prompts)} chosen prompts" if prompts else "")
        )
