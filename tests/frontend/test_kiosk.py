"""The booth's kiosk (/kiosk): enrolment, refusal, per-device limits, a new voter after each
vote and after idle time, the QR code, and screening that does not flag a kiosk's crowd."""

from __future__ import annotations

import hashlib
import io
import json
import xml.etree.ElementTree as ElementTree
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from arena.battles.kiosks import kiosk_register
from arena.battles.models import Answer, Battle, KioskDevice, Vote
from arena.leaderboard.screening import ScreeningRules, VoteSeen, screen, votes_seen
from frontend.voters import KIOSK_COOKIE, SESSION_KIOSK_SEEN
from tests import factories

pytestmark = pytest.mark.django_db


def enrolment_link(name: str) -> str:
    out = io.StringIO()
    call_command("kiosks", "add", name, "--url", "http://testserver", stdout=out)
    return out.getvalue().strip().splitlines()[-1].removeprefix("http://testserver")


def enrolled_kiosk(name: str = "booth-1") -> Client:
    client = Client(enforce_csrf_checks=True)
    link = enrolment_link(name)
    form = client.get(link)
    client.post(link, {"csrfmiddlewaretoken": form.cookies["csrftoken"].value})
    page = client.get("/kiosk")
    assert page.status_code == 200
    client.csrf = client.cookies["csrftoken"].value
    return client


def phone() -> Client:
    client = Client(enforce_csrf_checks=True)
    client.get("/")
    client.csrf = client.cookies["csrftoken"].value
    return client


def post(client: Client, url: str, body: dict | None = None):
    return client.post(
        url, json.dumps(body or {}), content_type="application/json", HTTP_X_CSRFTOKEN=client.csrf
    )


def start(client: Client, prompt: str = "Hello"):
    return post(client, "/api/battles", {"prompt": prompt})


def finish(battle_id: str) -> None:
    """The answers as the socket would have stored them, long enough ago to vote on."""
    Battle.objects.filter(pk=battle_id).update(
        state=Battle.State.COMPLETE, completed_at=timezone.now() - timedelta(minutes=1)
    )
    Answer.objects.filter(battle_id=battle_id).update(text="An answer.", finish_reason="stop")


@pytest.fixture
def contestants():
    return factories.contestant("left"), factories.contestant("right")


# -- enrolment and refusal -------------------------------------------------------------------


def test_an_organizer_enrols_a_device_with_a_one_time_link_and_only_hashes_are_stored():
    client = Client(enforce_csrf_checks=True)
    link = enrolment_link("Booth 1")
    device = KioskDevice.objects.get()
    assert device.name == "booth-1" and device.status == "waiting for enrolment"
    assert link.split("/")[-1] not in device.enrolment_hash  # stored hashed, not as given

    # Looking at the link (a chat preview, a mail scanner) does not spend it.
    form = client.get(link)
    assert form.status_code == 200 and b"Enrol this device" in form.content
    assert client.get("/kiosk").status_code == 403

    enrolled = client.post(link, {"csrfmiddlewaretoken": form.cookies["csrftoken"].value})
    assert enrolled.status_code == 302 and enrolled["Location"] == "/kiosk"
    cookie = enrolled.cookies[KIOSK_COOKIE]
    assert cookie["httponly"] and cookie["max-age"] > 300 * 24 * 3600
    device.refresh_from_db()
    assert device.status == "enrolled" and device.enrolment_hash == ""
    assert device.token_hash == hashlib.sha256(cookie.value.encode()).hexdigest()
    assert cookie.value not in device.token_hash

    page = client.get("/kiosk")
    assert page.status_code == 200
    assert b'src="/kiosk/qr.svg"' in page.content and b"<a " not in page.content

    # The link works once: a second device (or an attacker who saw it) gets nothing.
    other = Client()
    assert other.post(link).status_code == 403
    assert KIOSK_COOKIE not in other.cookies


def test_an_expired_enrolment_link_is_refused(settings):
    client = Client()
    link = enrolment_link("late")
    KioskDevice.objects.update(enrolment_expires_at=timezone.now() - timedelta(seconds=1))
    refused = client.post(link)
    assert refused.status_code == 403 and b"does not work" in refused.content


@pytest.mark.parametrize(
    "cookie", [None, "made-up-token", "x" * 10_000, ""], ids=["none", "forged", "huge", "empty"]
)
def test_an_unregistered_device_gets_an_explanation_not_the_kiosk(cookie):
    client = Client()
    if cookie is not None:
        client.cookies[KIOSK_COOKIE] = cookie
    page = client.get("/kiosk")
    assert page.status_code == 403
    assert b"not a registered kiosk" in page.content and b"kiosks add" in page.content
    client.get("/")
    renewed = client.post("/kiosk/next-voter", HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value)
    assert renewed.status_code == 403


def test_a_revoked_kiosk_is_refused_at_once():
    kiosk = enrolled_kiosk("booth-1")
    call_command("kiosks", "revoke", "booth-1", stdout=io.StringIO())
    assert kiosk.get("/kiosk").status_code == 403
    assert KioskDevice.objects.get().status == "revoked"


def test_a_new_link_replaces_a_lost_cookie():
    kiosk_register(name="booth-1")
    out = io.StringIO()
    call_command("kiosks", "reenrol", "booth-1", "--url", "http://testserver", stdout=out)
    link = out.getvalue().strip().splitlines()[-1].removeprefix("http://testserver")
    client = Client()
    assert client.post(link).status_code == 302
    assert client.get("/kiosk").status_code == 200


# -- rate limits per device ------------------------------------------------------------------


def test_a_kiosk_has_its_own_limit_instead_of_the_session_and_network_ones(settings, contestants):
    settings.ARENA_BATTLES_PER_MINUTE = 1
    settings.ARENA_BATTLES_PER_MINUTE_PER_IP = 2
    settings.ARENA_KIOSK_BATTLES_PER_MINUTE = 4
    kiosk = enrolled_kiosk("booth-1")

    # Many voters on one screen: past both the per-session and the per-network limits.
    for _ in range(4):
        assert start(kiosk).status_code == 201
        assert post(kiosk, "/kiosk/next-voter").status_code == 200
    refused = start(kiosk)
    assert refused.status_code == 429 and "kiosk" in refused.json()["error"]

    # The phones on the same network (same address here) keep the network's share...
    visitor = phone()
    assert start(visitor).status_code == 201
    # ...and their own limits.
    assert start(visitor).status_code == 429

    # A second registered device has a budget of its own.
    assert start(enrolled_kiosk("booth-2")).status_code == 201
    assert Battle.objects.filter(kiosk__name="booth-1").count() == 4
    assert Battle.objects.filter(kiosk__name="booth-2").count() == 1


def test_a_revoked_kiosk_falls_back_to_the_ordinary_limits(settings, contestants):
    settings.ARENA_BATTLES_PER_MINUTE = 1
    settings.ARENA_KIOSK_BATTLES_PER_MINUTE = 10
    kiosk = enrolled_kiosk("booth-1")
    call_command("kiosks", "revoke", "booth-1", stdout=io.StringIO())
    assert start(kiosk).status_code == 201
    assert start(kiosk).status_code == 429
    assert Battle.objects.filter(kiosk__isnull=False).count() == 0


# -- a new voter after each vote, and after idle time ----------------------------------------


def test_each_vote_at_a_kiosk_ends_that_voters_session(contestants):
    kiosk = enrolled_kiosk()
    first = start(kiosk).json()["battle"]
    finish(first)
    voted = post(kiosk, f"/api/battles/{first}/vote", {"choice": "a"})
    assert voted.status_code == 200 and set(voted.json()["reveal"].values()) == {"left", "right"}

    second = start(kiosk).json()["battle"]
    keys = dict(Battle.objects.values_list("pk", "voter_key"))
    assert keys[first] != keys[second], "the next person at the booth is a new voter"
    # The last voter's battle is no longer this screen's to vote on again.
    again = post(kiosk, f"/api/battles/{first}/vote", {"choice": "b"})
    assert again.status_code == 403
    assert Vote.objects.get().choice == "a"


def test_a_voter_idle_past_the_limit_is_replaced_and_an_active_one_is_kept(settings, contestants):
    settings.ARENA_KIOSK_IDLE_SECONDS = 60
    kiosk = enrolled_kiosk()
    first = start(kiosk).json()["battle"]
    second = start(kiosk).json()["battle"]  # the same person, still at the screen

    session = kiosk.session
    session[SESSION_KIOSK_SEEN] -= 61  # walked away a minute ago
    session.save()
    third = start(kiosk).json()["battle"]

    keys = dict(Battle.objects.values_list("pk", "voter_key"))
    assert keys[first] == keys[second]
    assert keys[third] != keys[second]


def test_the_kiosk_page_and_its_clear_button_each_start_a_new_voter(contestants):
    kiosk = enrolled_kiosk()
    keys = []
    for renew in (lambda: kiosk.get("/kiosk"), lambda: post(kiosk, "/kiosk/next-voter")):
        renew()
        battle = start(kiosk).json()["battle"]
        keys.append(Battle.objects.get(pk=battle).voter_key)
    assert len(set(keys)) == 2


def test_an_ordinary_voter_keeps_one_identity_across_votes(contestants):
    visitor = phone()
    first = start(visitor).json()["battle"]
    finish(first)
    assert post(visitor, f"/api/battles/{first}/vote", {"choice": "a"}).status_code == 200
    second = start(visitor).json()["battle"]
    keys = dict(Battle.objects.values_list("pk", "voter_key"))
    assert keys[first] == keys[second]


# -- the QR code -----------------------------------------------------------------------------


def test_the_qr_code_is_an_svg_drawn_for_the_configured_address(settings):
    settings.ARENA_PUBLIC_URL = "https://arena.example.org"
    client = Client()
    reply = client.get("/kiosk/qr.svg")
    assert reply.status_code == 200 and reply["Content-Type"] == "image/svg+xml"
    root = ElementTree.fromstring(reply.content)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "https://arena.example.org" in root.find("{http://www.w3.org/2000/svg}title").text
    drawn = root.find("{http://www.w3.org/2000/svg}path").get("d")
    assert drawn.count("h") > 50  # modules drawn, not an empty image

    settings.ARENA_PUBLIC_URL = "https://elsewhere.example.org"
    other = ElementTree.fromstring(client.get("/kiosk/qr.svg").content)
    assert other.find("{http://www.w3.org/2000/svg}path").get("d") != drawn


# -- screening -------------------------------------------------------------------------------


def seen(voter: str, *, kiosk: bool, at: float) -> VoteSeen:
    return VoteSeen(voter, "venue-network", at, "left", "right", "a", kiosk)


def test_a_kiosks_many_voters_are_not_flagged_as_many_sessions_on_one_network():
    rules = ScreeningRules(sessions_per_network=5, min_votes=1000)
    at_kiosk = [seen(f"booth-voter-{i}", kiosk=True, at=i * 100.0) for i in range(30)]
    assert not [f for f in screen(at_kiosk, lambda a, b: None, rules) if f.kind == "network"]

    # The same number of sessions without a registered kiosk is the signal it always was.
    from_phones = [seen(f"phone-{i}", kiosk=False, at=i * 100.0) for i in range(30)]
    flagged = [f for f in screen(from_phones, lambda a, b: None, rules) if f.kind == "network"]
    assert [s.name for s in flagged[0].signals] == ["many_sessions"]


def test_screening_reads_which_votes_came_from_a_kiosk(contestants):
    kiosk = enrolled_kiosk()
    battle = start(kiosk).json()["battle"]
    finish(battle)
    post(kiosk, f"/api/battles/{battle}/vote", {"choice": "a"})
    visitor = phone()
    other = start(visitor).json()["battle"]
    finish(other)
    post(visitor, f"/api/battles/{other}/vote", {"choice": "b"})
    assert sorted(v.kiosk for v in votes_seen()) == [False, True]


def test_a_kiosk_voter_may_follow_up_but_the_next_person_may_not_continue_their_battle(
    settings, contestants
):
    settings.ARENA_KIOSK_IDLE_SECONDS = 60
    kiosk = enrolled_kiosk()
    battle = start(kiosk).json()["battle"]
    finish(battle)
    assert post(kiosk, f"/api/battles/{battle}/turns", {"prompt": "And?"}).status_code == 201
    finish(battle)

    session = kiosk.session
    session[SESSION_KIOSK_SEEN] -= 61  # walked away a minute ago
    session.save()
    refused = post(kiosk, f"/api/battles/{battle}/turns", {"prompt": "Mine now"})
    assert refused.status_code == 403 and refused.json()["code"] == "not_yours"
    assert Battle.objects.get(pk=battle).turns == 2
