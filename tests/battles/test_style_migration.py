"""Answers stored before `Answer.style_version` were counted under the line regexes; migration
0005 counts them again under the current rules and says so."""

import importlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from arena.battles.models import Answer
from arena.battles.style import STYLE_VERSION, style_features
from tests import factories

BEFORE = [("battles", "0005_kiosk_devices")]
AFTER = [("battles", "0006_answer_style_version")]
MARKDOWN = "Title\n===\n\n> - quoted\n> - items\n\nPass `**kwargs**`, **really**."
# What the line regexes stored for MARKDOWN: no setext header, no quoted list, two bold spans.
VERSION_1_COUNTS = {
    "tokens": 25,
    "header_counts": {f"h{i}": 0 for i in range(1, 7)},
    "list_counts": {"ordered": 0, "unordered": 0},
    "bold_counts": {"**": 2, "__": 0},
}


@pytest.fixture
def migrated_back():
    """The database as it was before 0005, put forward again to the newest state afterwards."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield executor.loader.project_state(BEFORE).apps
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_stored_answers_are_recounted_under_the_current_rules(migrated_back, monkeypatch):
    # A batch smaller than the rows, so the recount walks several batches.
    migration = importlib.import_module("arena.battles.migrations.0006_answer_style_version")
    monkeypatch.setattr(migration, "RECOUNT_BATCH", 2)
    old_answer = migrated_back.get_model("battles", "Answer")
    # The battle as that schema has it too: the current model has columns added since.
    old_battle = migrated_back.get_model("battles", "Battle")
    left, right = factories.contestant("left"), factories.contestant("right")
    texts = [MARKDOWN, "plain", "1. one\n2. two", "", "## Hi\n- **x**"]
    for i in range(0, len(texts), 2):
        battle = old_battle.objects.create(prompt="Hi", voter_key="v", ip_hash="ip")
        for side, who, text in zip("ab", (left, right), texts[i : i + 2], strict=False):
            old_answer.objects.create(
                battle_id=battle.pk, side=side, contestant_id=who.pk, text=text, **VERSION_1_COUNTS
            )

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    new_answer = executor.loader.project_state(AFTER).apps.get_model("battles", "Answer")
    stored = list(new_answer.objects.order_by("pk"))
    assert [a.text for a in stored] == texts
    for answer in stored:
        expected = style_features(answer.text)
        assert answer.style_version == STYLE_VERSION
        assert (answer.tokens, answer.header_counts, answer.list_counts, answer.bold_counts) == (
            expected.tokens,
            expected.headers,
            expected.lists,
            expected.bold,
        )
    first = stored[0]
    assert first.header_counts["h1"] == 1 and first.list_counts["unordered"] == 2
    assert first.bold_counts == {"**": 1, "__": 0}


@pytest.mark.django_db(transaction=True)
def test_a_row_written_by_code_older_than_the_field_says_it_follows_the_first_rules(
    migrated_back,
):
    old_answer = migrated_back.get_model("battles", "Answer")  # knows no style_version
    MigrationExecutor(connection).migrate(AFTER)
    left, right = factories.contestant("left"), factories.contestant("right")
    # The battle as the schema of 0005 and 0006 has it: the current model has columns since.
    battle = migrated_back.get_model("battles", "Battle").objects.create(
        prompt="Hi", voter_key="v", ip_hash="ip"
    )

    # A worker still running the old code stores an answer after the upgrade.
    old_answer.objects.create(
        battle_id=battle.pk, side="a", contestant_id=left.pk, text=MARKDOWN, **VERSION_1_COUNTS
    )
    Answer.objects.create(battle_id=battle.pk, side="b", contestant=right, text="new code")

    assert dict(
        Answer.objects.filter(battle_id=battle.pk).values_list("side", "style_version")
    ) == {"a": 1, "b": STYLE_VERSION}
