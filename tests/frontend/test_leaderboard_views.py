import xml.etree.ElementTree as ET

import pytest
from django.test import Client

from arena.battles.models import Battle
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.services import phase_leaderboard_fit
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def votes():
    factories.round_robin_votes(("left", "right", "third"), 9, lambda i: "a" if i % 2 else "tie")


def test_with_no_votes_the_pages_say_so():
    client = Client()
    assert b"No counted votes yet" in client.get("/leaderboard/").content
    assert client.get("/api/leaderboard").json()["n_battles"] == 0
    ET.fromstring(client.get("/leaderboard/intervals.svg").content)


def test_the_public_leaderboard_shows_both_fits(votes):
    client = Client()
    page = client.get("/leaderboard/")
    assert page.status_code == 200
    for name in ("left", "right", "third"):
        assert name.encode() in page.content
    assert b"Style coefficients" in page.content
    assert b"Style coefficients" not in client.get("/leaderboard/?kind=raw").content


def test_the_json_endpoint_carries_tables_matrices_and_analyses(votes):
    data = Client().get("/api/leaderboard").json()
    assert data["n_battles"] == 9
    assert [s["rank"] for s in data["style"]["scores"]][0] == 1
    assert len(data["raw"]["win_probability"]) == 3
    assert data["analyses"]["votes_per_model"] == {"left": 6, "right": 6, "third": 6}


def test_a_closed_phases_table_is_not_shown_as_the_global_one(votes):
    client = Client()
    assert client.get("/api/leaderboard").json()["n_battles"] == 9  # the live fit of all votes
    battles = list(Battle.objects.order_by("pk").values_list("pk", flat=True))
    left_right = battles[0::3]  # the round robin's left-right battles
    Battle.objects.filter(pk__in=left_right).update(phase="phase-1")
    phase = phase_leaderboard_fit(phase="phase-1", bootstrap_rounds=5)  # the phase closes
    assert phase.n_battles == 3 and RatingSnapshot.objects.first() == phase  # the newest

    data = client.get("/api/leaderboard").json()

    assert (data["source"], data["n_battles"]) == ("live", 9)
    assert b"9 counted battles" in client.get("/leaderboard/").content
    for plot in ("/leaderboard/winrates.svg", "/leaderboard/intervals.svg"):
        assert b"third" in client.get(plot).content  # no battle of the phase's had it


def test_the_plots_are_svg_images(votes):
    client = Client()
    for url in (
        "/leaderboard/intervals.svg",
        "/leaderboard/intervals.svg?kind=raw",
        "/leaderboard/winrates.svg",
    ):
        reply = client.get(url)
        assert reply["Content-Type"] == "image/svg+xml"
        root = ET.fromstring(reply.content)
        assert root.tag.endswith("svg")
        assert b"left" in reply.content


def test_the_live_screen_is_a_page_with_no_inline_script():
    page = Client().get("/leaderboard/live")
    assert page.status_code == 200
    assert b"leaderboard_live.js" in page.content and b"<script>" not in page.content
