"""A voter as the site sees one over HTTP: a session cookie and a CSRF token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx2
from django.contrib.sessions.models import Session


@dataclass
class HttpVoter:
    base_url: str
    client: httpx2.Client

    @classmethod
    def arrive(cls, base_url: str) -> HttpVoter:
        client = httpx2.Client(base_url=base_url, timeout=30)
        client.get("/").raise_for_status()
        return cls(base_url, client)

    @property
    def csrf(self) -> str:
        return self.client.cookies["csrftoken"]

    @property
    def voter_id(self) -> str:
        """The random voter id the site keeps in this voter's session."""
        session = Session.objects.get(session_key=self.client.cookies["sessionid"])
        return session.get_decoded()["arena_voter"]

    def post(self, path: str, body: dict[str, Any]) -> httpx2.Response:
        return self.client.post(
            path, json=body, headers={"X-CSRFToken": self.csrf, "Referer": self.base_url + "/"}
        )
