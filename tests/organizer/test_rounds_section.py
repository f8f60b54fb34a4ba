"""The dashboard's targeted rounds: a section per round with its tally and both fits, for
staff only, with names and notes escaped."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from arena.battles.services import targeted_round_schedule
from cluster.backends import cluster_backend
from frontend.organizer_rounds import targeted_round_sections
from tests import factories

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def local_cluster(settings, tmp_path):
    """The dashboard reads the cluster live: here a local backend with no jobs."""
    settings.CLUSTER_BACKEND = "local"
    settings.VAR_DIR = tmp_path / "var"
    return cluster_backend()


@pytest.fixture
def played_round():
    """ann against a contestant with a hostile name: ann wins 14 to 6, and ann's answers are
    the longer in every battle, so style cannot be told from the model."""
    ann, other = factories.contestant("ann"), factories.contestant(HOSTILE)
    targeted = targeted_round_schedule(
        contestant_a=ann, contestant_b=other, battles=20, note="<script>alert('note')</script>"
    )
    for i in range(20):
        factories.round_vote(
            targeted, a_wins=i < 14, a_tokens=300, b_tokens=100, a_first=i % 2 == 0
        )
    targeted.battles_served = 20
    targeted.save(update_fields=["battles_served"])
    return targeted


def test_each_round_is_a_section_with_its_tally_and_both_fits(played_round):
    (section,) = targeted_round_sections()
    assert section.title == f"Targeted round {played_round.pk}: ann vs {HOSTILE}"
    assert section.note.startswith(
        "ann 14 wins to 6 in 20 battles. All 20 battles served, 20 completed, 20 voted, "
        "20 in the fit."
    )
    raw, styled = section.rows
    assert raw[0] == "raw" and raw[1].startswith("ann 1074 (")  # 1000 + 200·log10(14/6)
    assert raw[3].startswith("+147 (")  # 400·log10(14/6)
    assert styled[0] == "style-controlled" and styled[1:5] == ["—"] * 4
    assert styled[5].startswith("not determined: the answers' style moved with the model")


def test_staff_see_the_rounds_escaped_and_others_do_not(played_round):
    staff = Client()
    staff.force_login(User.objects.create_user("org", password="x", is_staff=True))
    page = staff.get("/organizer/").content.decode()
    assert f"Targeted round {played_round.pk}: ann vs &lt;img src=x onerror=alert(1)&gt;" in page
    assert "ann 14 wins to 6 in 20 battles" in page
    assert "&lt;script&gt;alert(&#x27;note&#x27;)&lt;/script&gt;" in page
    assert HOSTILE not in page and "<script>alert(" not in page

    member = Client()
    member.force_login(User.objects.create_user("voter", password="x"))
    assert member.get("/organizer/").status_code == 403
    assert Client().get("/organizer/").status_code == 302


def test_no_rounds_no_section():
    assert targeted_round_sections() == []
