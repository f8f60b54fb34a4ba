"""Run one set of SQL statements per database vendor in a migration, for the append-only
triggers of the journal and the trajectory (PostgreSQL in production, SQLite for `make demo`).
The leading underscore keeps Django's migration loader from taking this module for a
migration."""


def vendor_sql(what: str, statements_by_vendor: dict[str, str | list[str]]):
    """A `RunPython` function executing the connection's vendor's statements; a vendor with
    none fails the migration, naming `what` (rather than leaving the table unguarded)."""

    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor not in statements_by_vendor:
            raise RuntimeError(
                f"{what} is written for PostgreSQL and SQLite, not {vendor}: add it for this "
                "database before migrating"
            )
        statements = statements_by_vendor[vendor]
        for statement in [statements] if isinstance(statements, str) else statements:
            schema_editor.execute(statement, params=None)  # no placeholders: `%` is plpgsql

    return run
