"""The experiment journal, append-only in the database itself: a trigger refuses every UPDATE
and DELETE of a row, whoever sends it (the platform's code, the admin, a psql session of the
application's role). TRUNCATE is left alone: it is not a row change, needs the table's owner,
and is how Django's test runner empties tables between tests."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from agents.migrations._vendor_sql import vendor_sql

POSTGRESQL_FORWARD = """
CREATE FUNCTION agents_journalentry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the experiment journal is append-only: % of agents_journalentry refused',
        TG_OP USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER agents_journalentry_append_only
    BEFORE UPDATE OR DELETE ON agents_journalentry
    FOR EACH ROW EXECUTE FUNCTION agents_journalentry_append_only();
"""
POSTGRESQL_BACKWARD = """
DROP TRIGGER IF EXISTS agents_journalentry_append_only ON agents_journalentry;
DROP FUNCTION IF EXISTS agents_journalentry_append_only();
"""
# The embedded (SQLite) database of a quick local loop gets the same guarantee.
SQLITE_FORWARD = [
    f"CREATE TRIGGER agents_journalentry_no_{op.lower()} BEFORE {op} ON agents_journalentry "
    f"BEGIN SELECT RAISE(ABORT, 'the experiment journal is append-only: {op} refused'); END"
    for op in ("UPDATE", "DELETE")
]
SQLITE_BACKWARD = [
    f"DROP TRIGGER IF EXISTS agents_journalentry_no_{op}" for op in ("update", "delete")
]



class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0005_judge_tokens"),
        ("competition", "0002_arena_closes_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="JournalEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("hypothesis", "Hypothesis"),
                            ("result", "Result"),
                            ("decision", "Decision"),
                            ("note", "Note"),
                        ],
                        default="note",
                        max_length=16,
                    ),
                ),
                ("text", models.TextField()),
                (
                    "created_at",
                    models.DateTimeField(
                        db_index=True, default=django.utils.timezone.now, editable=False
                    ),
                ),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="journal_entries",
                        to="agents.agent",
                    ),
                ),
                (
                    "phase",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="journal_entries",
                        to="competition.phase",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "journal entries",
                "ordering": ["agent", "created_at", "pk"],
            },
        ),
        migrations.RunPython(
            vendor_sql(
                "the journal's append-only trigger",
                {"postgresql": POSTGRESQL_FORWARD, "sqlite": SQLITE_FORWARD},
            ),
            vendor_sql(
                "the journal's append-only trigger",
                {"postgresql": POSTGRESQL_BACKWARD, "sqlite": SQLITE_BACKWARD},
            ),
        ),
    ]
