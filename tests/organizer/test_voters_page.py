"""The organizer's voter screening page: flagged voters with their evidence, and exclusions
made and lifted by staff only, with who decided on record."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from arena.battles.models import VoterExclusion
from arena.battles.services import salted_hash, vote_record
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def bot_and_crowd(settings):
    # The votes below are made within a second: bursts are not what this page test is about.
    settings.ARENA_VOTER_SCREENING = {"min_votes": 10, "burst_votes": 1000}
    strong, weak = factories.contestant("strong"), factories.contestant("weak")
    for voter, choice, n in (("ann", "a", 12), ("bob", "a", 12), ("sybil", "b", 24)):
        for _ in range(n):
            battle = factories.complete_battle(voter=voter, a=strong, b=weak)
            vote_record(
                battle_id=battle.pk,
                choice=choice,
                voter_key=factories.voter_key(voter),
                ip_hash=salted_hash("ip", voter),
            )
    return factories.voter_key("sybil")


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("org", password="x", is_staff=True))
    return client


def test_the_page_lists_the_bot_with_its_evidence_and_the_dashboard_links_it(staff, bot_and_crowd):
    page = staff.get("/organizer/voters/").content.decode()
    assert bot_and_crowd[:12] in page
    assert "voted for weak in 24 of 24 decisive battles" in page
    assert factories.voter_key("ann")[:12] not in page

    dashboard = staff.get("/organizer/audit/").content.decode()
    assert "Flagged voters" in dashboard and bot_and_crowd[:12] in dashboard
    assert 'href="/organizer/voters/"' in dashboard


def test_staff_exclude_and_lift_with_their_name_and_reason_on_record(staff, bot_and_crowd):
    reply = staff.post(
        "/organizer/voters/",
        {"action": "exclude", "kind": "session", "key": bot_and_crowd, "reason": "watermark bot"},
        follow=True,
    )
    exclusion = VoterExclusion.objects.get()
    assert f"Excluded as #{exclusion.pk}." in reply.content.decode()
    assert (exclusion.excluded_by, exclusion.reason) == ("org", "watermark bot")
    assert {s["name"] for s in exclusion.evidence["signals"]} >= {"one_sided"}

    staff.post(
        "/organizer/voters/",
        {"action": "lift", "exclusion": exclusion.pk, "reason": "second look"},
    )
    exclusion.refresh_from_db()
    assert exclusion.lifted_at is not None and exclusion.lifted_by == "org"


def test_an_exclusion_without_a_reason_is_refused_and_nothing_changes(staff, bot_and_crowd):
    reply = staff.post(
        "/organizer/voters/",
        {"action": "exclude", "kind": "session", "key": bot_and_crowd, "reason": " "},
        follow=True,
    )
    assert "Say why" in reply.content.decode()
    assert not VoterExclusion.objects.exists()


def test_only_staff_may_see_or_exclude(bot_and_crowd):
    anonymous = Client()
    assert anonymous.get("/organizer/voters/").status_code == 302
    voter = Client()
    voter.force_login(User.objects.create_user("voter", password="x"))
    reply = voter.post(
        "/organizer/voters/",
        {"action": "exclude", "kind": "session", "key": bot_and_crowd, "reason": "mine"},
    )
    assert reply.status_code == 403
    assert not VoterExclusion.objects.exists()
