"""Excluding a voter: its votes leave the fit, the export and the phase feedback, the published
table says so, and lifting the exclusion puts everything back — with the record kept."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from arena.battles.export import battle_export_rows
from arena.battles.models import VoterExclusion
from arena.battles.services import (
    ExclusionRefused,
    salted_hash,
    vote_record,
    voter_exclude,
    voter_exclusion_lift,
)
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.services import leaderboard_refresh, phase_leaderboard_fit
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def votes_from(voter: str, a, b, choice: str, n: int, *, ip: str = "10.0.0.1") -> None:
    for _ in range(n):
        battle = factories.complete_battle(voter=voter, a=a, b=b)
        battle.phase = "phase-1"
        battle.save(update_fields=["phase"])
        vote_record(
            battle_id=battle.pk,
            choice=choice,
            voter_key=factories.voter_key(voter),
            ip_hash=salted_hash("ip", ip),
        )


def refit() -> RatingSnapshot:
    for snapshot in RatingSnapshot.objects.filter(source="live"):
        snapshot.created_at -= timedelta(seconds=5)  # as if the last refit were long ago
        snapshot.save(update_fields=["created_at"])
    snapshot = leaderboard_refresh(holder="test")
    assert snapshot is not None
    return snapshot


def score(snapshot: RatingSnapshot, model: str) -> float:
    return next(s["score"] for s in snapshot.raw["scores"] if s["model"] == model)


@pytest.fixture
def crowd_and_bot():
    strong, weak = factories.contestant("strong"), factories.contestant("weak")
    for person in ("ann", "bob", "cy"):
        votes_from(person, strong, weak, "a", 8)
        votes_from(person, strong, weak, "b", 2)
    votes_from("sybil", strong, weak, "b", 20, ip="10.6.6.6")
    return strong, weak


def test_an_excluded_session_leaves_the_fit_the_export_and_the_phase_feedback(crowd_and_bot):
    with_bot = refit()
    assert with_bot.n_battles == 50

    exclusion = voter_exclude(
        kind="session",
        key=factories.voter_key("sybil")[:10],  # a prefix, as the screens show it
        reason="always votes for weak",
        excluded_by="organizer",
    )

    without = refit()  # no new vote: the exclusion alone makes the refit due
    assert without.n_battles == 30
    assert score(without, "weak") < score(with_bot, "weak")
    assert without.exclusions == {
        "votes_excluded": 20,
        "in_force": [
            {
                "id": exclusion.pk,
                "kind": "session",
                "since": exclusion.created_at.isoformat(),
                "reason": "always votes for weak",
                "votes": 20,
            }
        ],
    }
    assert len(list(battle_export_rows())) == 30
    phase_fit = phase_leaderboard_fit(phase="phase-1", bootstrap_rounds=10)
    assert phase_fit.n_battles == 30 and phase_fit.exclusions["votes_excluded"] == 20


def test_lifting_an_exclusion_restores_the_votes_and_keeps_the_record(crowd_and_bot):
    refit()
    exclusion = voter_exclude(
        kind="session", key=factories.voter_key("sybil"), reason="bot", excluded_by="org"
    )
    assert refit().n_battles == 30

    voter_exclusion_lift(exclusion_id=exclusion.pk, lifted_by="org", reason="it was a person")

    restored = refit()
    assert restored.n_battles == 50 and restored.exclusions["in_force"] == []
    record = VoterExclusion.objects.get(pk=exclusion.pk)
    assert record.lifted_at is not None and record.lift_reason == "it was a person"
    again = voter_exclude(
        kind="session", key=factories.voter_key("sybil"), reason="bot after all", excluded_by="o"
    )
    assert again.pk != exclusion.pk and VoterExclusion.objects.count() == 2


def test_excluding_a_network_leaves_out_every_session_behind_it(crowd_and_bot):
    refit()
    strong, weak = crowd_and_bot
    votes_from("sybil-2", strong, weak, "b", 5, ip="10.6.6.6")  # a fresh cookie, same address
    voter_exclude(
        kind="network", key=salted_hash("ip", "10.6.6.6"), reason="bot farm", excluded_by="o"
    )
    assert refit().n_battles == 30


@pytest.mark.parametrize(
    ("kind", "key", "reason", "message"),
    [
        ("session", "SYBIL", "", "Say why"),
        ("session", "abc", "bot", "at least 8 characters"),
        ("session", "ffffffffffff", "bot", "No counted vote"),
        ("visitor", "ffffffffffff", "bot", "Unknown voter kind"),
    ],
)
def test_an_exclusion_that_cannot_stand_is_refused_with_the_reason(
    crowd_and_bot, kind, key, reason, message
):
    key = factories.voter_key("sybil") if key == "SYBIL" else key
    with pytest.raises(ExclusionRefused, match=message):
        voter_exclude(kind=kind, key=key, reason=reason, excluded_by="o")
    assert not VoterExclusion.objects.exists()


def test_a_voter_is_excluded_once_and_an_exclusion_lifted_once(crowd_and_bot):
    key = factories.voter_key("sybil")
    first = voter_exclude(kind="session", key=key, reason="bot", excluded_by="o")
    with pytest.raises(ExclusionRefused, match=f"already excluded \\(#{first.pk}\\)"):
        voter_exclude(kind="session", key=key, reason="bot", excluded_by="o")
    voter_exclusion_lift(exclusion_id=first.pk, lifted_by="o", reason="person")
    with pytest.raises(ExclusionRefused, match="already lifted"):
        voter_exclusion_lift(exclusion_id=first.pk, lifted_by="o", reason="person")
    with pytest.raises(ExclusionRefused, match="no exclusion #999"):
        voter_exclusion_lift(exclusion_id=999, lifted_by="o", reason="x")


def test_the_voters_command_screens_excludes_lists_and_restores(crowd_and_bot, settings):
    settings.ARENA_VOTER_SCREENING = {"min_votes": 10, "z_limit": 3.0}
    sybil = factories.voter_key("sybil")

    out = StringIO()
    call_command("voters", "screen", "--json", stdout=out)
    flags = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {(f["kind"], f["key"]) for f in flags} >= {("session", sybil)}
    assert {s["name"] for f in flags if f["key"] == sybil for s in f["signals"]} >= {"one_sided"}

    out = StringIO()
    call_command("voters", "exclude", "session", sybil[:12], "--reason", "bot", stdout=out)
    assert "Excluded session" in out.getvalue()
    exclusion = VoterExclusion.objects.get()
    assert exclusion.evidence["signals"] and exclusion.excluded_by == "manage.py voters"

    out = StringIO()
    call_command("voters", "screen", stdout=out)
    assert f"session {sybil[:12]}: 20 votes, excluded (#{exclusion.pk})" in out.getvalue()

    call_command("voters", "restore", str(exclusion.pk), "--reason", "checked", stdout=StringIO())
    out = StringIO()
    call_command("voters", "list", stdout=out)
    assert f"#{exclusion.pk} session {sybil[:12]}" in out.getvalue()
    assert "lifted" in out.getvalue() and "checked" in out.getvalue()

    with pytest.raises(CommandError, match="already lifted"):
        call_command("voters", "restore", str(exclusion.pk), "--reason", "x", stdout=StringIO())
