"""Who is voting: a random id in the Django session and the client address, both only ever
stored as salted hashes."""

from __future__ import annotations

import secrets
from typing import Any

from arena.battles.kiosks import kiosk_for_token
from arena.battles.models import KioskDevice
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


# A kiosk keeps, in its session, when its current voter last acted: a voter idle longer than
# ARENA_KIOSK_IDLE_SECONDS has walked away, and the next person must not inherit the identity.
SESSION_KIOSK_SEEN = "arena_kiosk_seen"


def voter_renew(session: Any) -> str:
    """A new voter in this browser: a new session key and a new voter id, so the next person
    at a kiosk shares neither with the last."""
    session.cycle_key()
    session[SESSION_VOTER] = secrets.token_urlsafe(18)
    return salted_hash("voter", session[SESSION_VOTER])


def kiosk_voter(session: Any, *, now: float, idle_seconds: float) -> str:
    """The kiosk's current voter, renewed first when the last one has been idle too long."""
    seen = session.get(SESSION_KIOSK_SEEN)
    idle = not isinstance(seen, (int, float)) or now - seen > idle_seconds
    key = voter_renew(session) if idle else ensure_voter(session)
    session[SESSION_KIOSK_SEEN] = now
    return key


# The cookie an enrolled kiosk device keeps its token in (frontend/kiosk_views.py).
KIOSK_COOKIE = "arena_kiosk"


def kiosk_of_request(request: Any) -> KioskDevice | None:
    """The registered, unrevoked kiosk this browser is, or None for everyone else."""
    token = request.COOKIES.get(KIOSK_COOKIE)
    return kiosk_for_token(token) if token else None
