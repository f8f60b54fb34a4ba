"""`python -m infra.deploy.prepare [--no-migrate]`: what `up` does before it starts anything,
in one process (each Django start costs seconds of CPU here): collect the static files, apply
the migrations, and fail when any is still unapplied."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.deploy.prepare")
    parser.add_argument("--no-migrate", dest="migrate", action="store_false")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    call_command("collectstatic", interactive=False, verbosity=0)
    if args.migrate:
        call_command("migrate", interactive=False, verbosity=0)
    executor = MigrationExecutor(connection)
    unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if unapplied:
        names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in unapplied)
        print(f"unapplied migrations: {names} (run `manage.py migrate`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
