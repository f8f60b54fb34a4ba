"""A targeted round's result, read from real battles and votes: the round's progress, its
tally from A's side, and its own fit on the votes the leaderboard counts — and only those.

The votes are hand-made with a known answer, the study's round: A wins 39 to 18 in 65
battles (5 ties, 3 both bad), so the raw gap is 400·log10(43/22) = 116.4 points. A wrote the
longer answer in 50 of them and won 80 % of those points; B wrote it in 15 and A took 20 %
of those: voters followed length, and under style control the round is a tie.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from arena.battles.models import Battle, TargetedRound
from arena.battles.services import (
    battle_create,
    targeted_round_schedule,
    vote_record,
    voter_exclude,
)
from arena.leaderboard.rounds import targeted_round_results
from tests import factories

pytestmark = pytest.mark.django_db

SHORT, LONG = 100, 300


def studys_round(ann, bob):
    """The round of the module docstring, plus votes the fit must leave out."""
    targeted = targeted_round_schedule(
        contestant_a=ann, contestant_b=bob, battles=80, note="ann vs bob"
    )
    groups = [
        # (count, a_wins, a_tokens, b_tokens): A longer in 50, B longer in 15
        (35, True, LONG, SHORT), (6, False, LONG, SHORT), (5, "tie", LONG, SHORT),
        (3, "bothbad", LONG, SHORT), (3, True, SHORT, LONG), (12, False, SHORT, LONG),
    ]  # fmt: skip
    served = 0  # the round's battles, as the arena counts them when it claims a slot
    for count, a_wins, a_tokens, b_tokens in groups:
        for i in range(count):
            factories.round_vote(
                targeted, a_wins=a_wins, a_tokens=a_tokens, b_tokens=b_tokens, a_first=i % 2 == 0
            )
            served += 1
    # A's 39th win: the voter picked B, but B's answer named itself, and a leak loses.
    factories.round_vote(
        targeted, a_wins=False, a_tokens=LONG, b_tokens=SHORT, a_first=True, leaked_sides="b"
    )
    # Left out: a void battle (both sides named themselves) and an excluded voter's votes.
    for i in range(2):
        factories.round_vote(
            targeted, a_wins=False, a_tokens=LONG, b_tokens=SHORT, a_first=i == 0,
            leaked_sides="ab", void_reason="both leaked",
        )  # fmt: skip
    for i in range(3):
        factories.round_vote(
            targeted, a_wins=False, a_tokens=LONG, b_tokens=SHORT, a_first=i == 0, voter="bot"
        )
    voter_exclude(kind="session", key=factories.voter_key("bot"), reason="a bot", excluded_by="org")
    TargetedRound.objects.filter(pk=targeted.pk).update(battles_served=served + 6)
    # Outside the round: the same pair, but these votes are the arena's, not the round's.
    for i in range(10):
        battle = factories.complete_battle(voter=f"outside-{i}", a=bob, b=ann)
        vote_record(battle_id=battle.pk, choice="a", voter_key=battle.voter_key, ip_hash="ip")
    return targeted


@pytest.fixture
def pair():
    return factories.contestant("ann"), factories.contestant("bob")


def test_a_round_reports_its_tally_and_its_own_fits_on_the_votes_the_leaderboard_counts(pair):
    targeted = studys_round(*pair)
    (result,) = targeted_round_results()

    assert (result.round_id, result.model_a, result.model_b) == (targeted.pk, "ann", "bob")
    assert (result.scheduled, result.served, result.completed) == (80, 70, 70)
    assert (result.voted, result.in_fit, result.not_counted, result.excluded) == (70, 65, 2, 3)
    tally = result.tally
    assert (tally.wins_a, tally.wins_b, tally.ties, tally.both_bad) == (39, 18, 5, 3)
    assert tally.words() == "39 wins to 18 in 65 battles"
    assert result.headline() == "ann 39 wins to 18 in 65 battles (5 ties, 3 both bad)"
    assert result.open

    raw = result.raw
    assert raw.n_votes == 65
    assert raw.gap == pytest.approx(400 * math.log10(43 / 22), abs=0.05)
    assert raw.gap_interval[0] > 0 and raw.a_above_b > 0.975
    assert raw.verdict == "ann above bob (95% interval of the gap above 0)"

    styled = result.style
    assert styled.determined and styled.n_votes == 65
    assert styled.gap_interval[0] < 0 < styled.gap_interval[1]
    # 0 exactly if each length difference came with both signs equally often; here A was on
    # side A in 27 of its 50 longer answers, and the fit centres the features.
    assert abs(styled.gap) < 5
    assert styled.verdict == "a tie: the 95% interval of the gap includes 0"
    assert styled.style_coefficients["length"] > 1  # about ln 4: the longer answer won 4:1


def test_the_same_votes_and_seed_give_the_same_result(pair):
    studys_round(*pair)
    (first,) = targeted_round_results(seed=3)
    (again,) = targeted_round_results(seed=3)
    assert first.to_json() == again.to_json()


def test_a_round_without_votes_says_so_and_fits_nothing(pair):
    targeted_round_schedule(contestant_a=pair[0], contestant_b=pair[1], battles=5)
    (result,) = targeted_round_results()
    assert result.tally.votes == 0 and result.served == 0
    assert result.raw.reason == result.style.reason == "no counted votes yet"
    assert result.headline() == "ann 0 wins to 0 in 0 battles"


def report(*args):
    out = StringIO()
    call_command("battles", "target", "--report", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_battles_target_report_prints_each_round_and_its_json(pair):
    ann, bob = pair
    # A round served through the arena's own path: the round claims the battles.
    call_command("battles", "target", "ann", "bob", "--battles", "12", stdout=StringIO())
    for i in range(12):
        battle = battle_create(prompt="Hi", voter_key=f"k{i}", ip_hash=f"ip{i}")
        Battle.objects.filter(pk=battle.pk).update(
            state=Battle.State.COMPLETE, completed_at=timezone.now() - dt.timedelta(minutes=1)
        )
        ann_side = battle.answers.get(contestant=ann).side
        bob_side = "b" if ann_side == "a" else "a"
        vote_record(battle_id=battle.pk, choice=ann_side if i < 8 else bob_side,
                    voter_key=f"k{i}", ip_hash=f"ip{i}")  # fmt: skip
    (scheduled,) = TargetedRound.objects.all()

    text = report("--bootstrap", "50")
    lines = text.splitlines()
    assert lines[0] == f"targeted-round-{scheduled.pk}: ann (A) vs bob (B) [complete]"
    assert lines[1] == ("  battles: 12 scheduled, 12 served, 12 completed, 12 voted, 12 in the fit")
    assert lines[2] == "  tally: ann 8 wins to 4 in 12 battles"
    gap = 400 * math.log10(8 / 4)  # 120.4 points
    assert lines[3].startswith(f"  raw: gap +{gap:.0f} points (95% interval ")
    assert "; ann takes 67% of the points; " in lines[3]
    # 12 votes are enough for a gap, and the answers' style did not vary (no text here).
    assert lines[4].startswith(f"  style-controlled: gap +{gap:.0f} points")
    assert lines[5] == "    note: the answers' style did not vary: style control changes nothing"

    output = json.loads(report("--json", "--bootstrap", "50"))
    (entry,) = output["rounds"]
    assert entry["round"] == scheduled.pk and entry["tag"] == scheduled.tag
    assert entry["battles"] == {
        "scheduled": 12, "served": 12, "completed": 12, "voted": 12, "in_fit": 12,
        "not_counted": 0, "excluded": 0,
    }  # fmt: skip
    assert entry["tally"]["wins_a"] == 8 and entry["tally"]["wins_b"] == 4
    assert entry["raw"]["gap"] == pytest.approx(gap, abs=0.05)
    assert entry["raw"]["determined"] and entry["raw"]["a_above_b"] > 0.5
    assert set(entry["style"]) >= {"gap_interval", "a_above_b", "reason", "style_coefficients"}


def test_report_refuses_what_it_does_not_take(pair):
    with pytest.raises(CommandError, match="--report takes no contestants"):
        report("ann")
    with pytest.raises(CommandError, match="needs two contestants and --battles"):
        call_command("battles", "target", "ann", "bob")
    with pytest.raises(CommandError, match="--json goes with --report"):
        call_command("battles", "target", "ann", "bob", "--battles", "3", "--json")
    assert report() == "no targeted rounds yet\n"
