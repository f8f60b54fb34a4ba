"""Checks every organizer page must pass: staff only, and one navigation bar whose links all
answer, with the page itself marked."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.test import Client

PAGES = {
    "Phases": "/organizer/",
    "Agents": "/organizer/agents/",
    "Cluster": "/organizer/cluster/",
    "Evaluation": "/organizer/evaluation/",
    "Audit": "/organizer/audit/",
    "Voters": "/organizer/voters/",
}


def nav_of(html: str) -> str:
    (nav,) = re.findall(r'<nav class="organizer-nav".*?</nav>', html, flags=re.S)
    return nav


def nav_links(html: str) -> dict[str, str]:
    """Label → href of each link in the bar."""
    return {
        label: href
        for href, label in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', nav_of(html))
    }


def marked_current(html: str) -> list[str]:
    return re.findall(r'<a href="([^"]+)" aria-current="page">', nav_of(html))


def assert_nav(client: Client, html: str, *, current: list[str]) -> None:
    """Every organizer page is in the bar and answers; `current` (hrefs) are marked."""
    links = nav_links(html)
    assert {label: links.get(label) for label in PAGES} == PAGES
    assert marked_current(html) == current
    for href in links.values():
        assert client.get(href).status_code == 200, href


def assert_staff_only(url: str) -> None:
    anonymous = Client().get(url)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(f"/admin/login/?next={url.rstrip('?')}")
    member = Client()
    member.force_login(User.objects.create_user(f"voter-{len(url)}", password="x"))
    refused = member.get(url)
    assert refused.status_code == 403 and b"organizer-nav" not in refused.content
