from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from arena.battles.export import battle_export_rows, write_battle_export
from arena.battles.selectors import default_prompts
from arena.battles.services import prompts_load


class Command(BaseCommand):
    help = "Battles: export counted votes in the battle export format; load suggested prompts."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="write counted battles as JSONL (DESIGN.md §5)")
        export.add_argument("--out", required=True, type=Path, help="output file (.jsonl)")
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
            count = write_battle_export(battle_export_rows(), out)
            self.stdout.write(f"wrote {count} counted battles to {out}")
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
