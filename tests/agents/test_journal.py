"""The experiment journal: written and read through the agent API, each agent seeing only its
own, bounded, and append-only down to the database (raw SQL cannot change or delete a row)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client
from django.utils import timezone

from agents import journal
from agents.journal import JournalRefused, journal_add
from agents.models import JournalEntry
from agents.services import token_issue
from tests import factories
from tests.organizer import builders

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann():
    return builders.agent("ann")


def api(agent) -> Client:
    return Client(headers={"Authorization": f"Bearer {token_issue(agent=agent, kind='api')}"})


def test_an_agent_writes_entries_and_reads_them_back_with_the_phase_of_the_time(ann):
    phase = factories.running_phase()
    client = api(ann)

    made = client.post(
        "/api/v1/journal",
        {"text": "H1: DPO on ultrachat beats SFT by 2 points", "kind": "hypothesis"},
        content_type="application/json",
    )
    client.post("/api/v1/journal", {"text": "no kind: a note"}, content_type="application/json")

    assert made.status_code == 201
    assert made.json()["kind"] == "hypothesis" and made.json()["phase"] == phase.label
    entries = client.get("/api/v1/journal").json()["entries"]
    assert [(e["kind"], e["text"]) for e in entries] == [
        ("hypothesis", "H1: DPO on ultrachat beats SFT by 2 points"),
        ("note", "no kind: a note"),
    ]
    assert client.get("/api/v1/journal?limit=1").json()["entries"][0]["text"] == "no kind: a note"
    for bad in ("-1", "ten", "9" * 5000):
        reply = client.get(f"/api/v1/journal?limit={bad}")
        assert (
            reply.status_code == 400
            and "'limit' must be a whole number" in reply.json()["error"]["message"]
        )


def test_another_agents_entries_are_invisible(ann):
    ben = builders.agent("ben")
    journal_add(agent=ben, text="ben's secret plan", kind="decision")

    assert api(ann).get("/api/v1/journal").json() == {"entries": []}
    assert [e["text"] for e in api(ben).get("/api/v1/journal").json()["entries"]] == [
        "ben's secret plan"
    ]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"text": "   "}, 400, "the entry is empty"),
        ({"text": "x" * 8_001}, 400, "8,001 characters, over the limit of 8,000"),
        ({"text": "ok", "kind": "confession"}, 400, "kind must be one of hypothesis, result"),
        ({"text": "nul \x00 byte"}, 400, "NUL character"),
        ({"text": "lone \ud800 surrogate"}, 400, "not valid Unicode"),
        ({"text": 42}, 400, "'text' (the entry) and 'kind' must be strings"),
    ],
)
def test_a_bad_entry_is_refused_in_words_and_nothing_is_written(ann, body, status, message):
    reply = api(ann).post("/api/v1/journal", body, content_type="application/json")

    assert reply.status_code == status
    assert message in reply.json()["error"]["message"]
    assert not JournalEntry.objects.exists()


def test_the_longest_entry_allowed_is_kept_whole(ann):
    text = "é" * journal.MAX_TEXT_CHARS
    assert journal_add(agent=ann, text=text).text == text


def test_entries_per_hour_are_limited_and_the_refusal_says_when_to_retry(ann, monkeypatch):
    monkeypatch.setattr(journal, "MAX_ENTRIES_PER_HOUR", 3)
    now = timezone.now()
    for minutes in (50, 20, 10):
        journal_add(agent=ann, text=f"{minutes} min ago", now=now - dt.timedelta(minutes=minutes))

    reply = api(ann).post("/api/v1/journal", {"text": "one more"}, content_type="application/json")

    assert reply.status_code == 429
    # The oldest of the hour's three was 50 minutes ago: room again in about 10 minutes.
    message = reply.json()["error"]["message"]
    assert "at most 3 journal entries an hour: try again in" in message
    assert 590 <= int(message.split("try again in ")[1].split(" s")[0]) <= 602
    # An hour after the oldest, there is room again.
    journal_add(agent=ann, text="later", now=now + dt.timedelta(minutes=11))


def test_an_agents_journal_has_a_total_size(ann, monkeypatch):
    monkeypatch.setattr(journal, "MAX_ENTRIES_PER_AGENT", 2)
    start = timezone.now() - dt.timedelta(days=2)
    journal_add(agent=ann, text="one", now=start)
    journal_add(agent=ann, text="two", now=start + dt.timedelta(days=1))

    with pytest.raises(JournalRefused, match="your journal is full") as refused:
        journal_add(agent=ann, text="three")
    assert refused.value.code == "limit"


def test_the_database_refuses_to_change_or_delete_an_entry(ann):
    entry = journal_add(agent=ann, text="as written", kind="result")

    for statement in (
        "UPDATE agents_journalentry SET text = 'rewritten' WHERE id = %s",
        "DELETE FROM agents_journalentry WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement, [entry.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        JournalEntry.objects.filter(pk=entry.pk).update(kind="note")

    entry.refresh_from_db()
    assert (entry.text, entry.kind) == ("as written", "result")


def test_there_is_no_route_that_changes_or_deletes_an_entry(ann):
    entry = journal_add(agent=ann, text="as written")
    client = api(ann)

    for method in (client.put, client.patch, client.delete):
        assert method("/api/v1/journal").status_code == 405
        assert method(f"/api/v1/journal/{entry.pk}").status_code == 404


def test_the_admin_shows_entries_read_only(ann):
    from django.contrib.admin.sites import site
    from django.contrib.auth.models import User
    from django.test import RequestFactory

    journal_add(agent=ann, text="shown, never edited")
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create_superuser("root", password="x")
    admin = site._registry[JournalEntry]
    assert not admin.has_add_permission(request)
    assert not admin.has_change_permission(request)
    assert not admin.has_delete_permission(request)
