"""Who is voting: a random id in the Django session and the client address, both only ever
stored as salted hashes."""

from __future__ import annotations

import secrets
from typing import Any

from arena.battles.services import salted_hash

SESSION_VOTER = "arena_voter"


def ensure_voter(session: Any) -> str:
    voter = session.get(SESSION_VOTER)
    if not voter:
        voter = secrets.token_urlsafe(18)
        session[SESSION_VOTER] = voter
    return salted_hash("voter", voter)


def voter_key_or_none(session: Any) -> str | None:
    voter = session.get(SESSION_VOTER)
    return salted_hash("voter", voter) if voter else None


def ip_hash(address: str | None) -> str:
    return salted_hash("ip", address or "unknown")
