"""Kiosk devices: booth screens that organizers register, enrol once and may revoke.

A device proves itself with a random token in a cookie; only its SHA-256 is stored (the
tokens are 256 random bits, so a plain hash cannot be reversed by guessing).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from arena.battles.models import KioskDevice

# Longer than any token we issue (43 characters): anything longer is not ours, so it is not
# even hashed.
TOKEN_MAX_CHARS = 100


class KioskRefused(ValueError):
    """An organizer's kiosk command that cannot be done; the message says why."""


@dataclass(frozen=True)
class KioskEnrolment:
    device: KioskDevice
    enrolment_token: str  # shown once, in the enrolment URL; only its hash is stored


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def kiosk_register(*, name: str) -> KioskEnrolment:
    """Register a device and issue its one-time enrolment token."""
    slug = slugify(name)[:60]
    if not slug:
        raise KioskRefused("Give the kiosk a name made of letters, digits or dashes.")
    enrolment = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            device = KioskDevice.objects.create(
                name=slug,
                enrolment_hash=token_hash(enrolment),
                enrolment_expires_at=_enrolment_deadline(),
            )
    except IntegrityError:
        raise KioskRefused(f"A kiosk named {slug!r} exists already.") from None
    return KioskEnrolment(device, enrolment)


def kiosk_reenrol(*, name: str) -> KioskEnrolment:
    """A new enrolment link for a device (a replaced screen, a cleared browser). The device's
    current token stops working when the new link is used, not before."""
    enrolment = secrets.token_urlsafe(32)
    updated = KioskDevice.objects.filter(name=name, revoked_at__isnull=True).update(
        enrolment_hash=token_hash(enrolment), enrolment_expires_at=_enrolment_deadline()
    )
    if not updated:
        raise KioskRefused(f"There is no active kiosk named {name!r}.")
    return KioskEnrolment(KioskDevice.objects.get(name=name), enrolment)


def kiosk_enrol(*, enrolment_token: str) -> tuple[KioskDevice, str] | None:
    """Spend a one-time enrolment token: the device and its new device token, or None when
    the token is unknown, spent, expired or revoked. The conditional UPDATE is the lock: two
    visits of one link never both enrol."""
    if not enrolment_token or len(enrolment_token) > TOKEN_MAX_CHARS:
        return None
    device_token = secrets.token_urlsafe(32)
    now = timezone.now()
    hashed = token_hash(enrolment_token)
    enrolled = KioskDevice.objects.filter(
        enrolment_hash=hashed, enrolment_expires_at__gt=now, revoked_at__isnull=True
    )
    device = enrolled.first()
    if device is None:
        return None
    taken = enrolled.filter(pk=device.pk).update(
        enrolment_hash="",
        enrolment_expires_at=None,
        token_hash=token_hash(device_token),
        enrolled_at=now,
    )
    if not taken:
        return None
    device.refresh_from_db()
    return device, device_token


def kiosk_revoke(*, name: str) -> KioskDevice:
    """Stop a device's token (and any enrolment link) now. The record and its battles stay."""
    revoked = KioskDevice.objects.filter(name=name, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), token_hash="", enrolment_hash="", enrolment_expires_at=None
    )
    if not revoked:
        if KioskDevice.objects.filter(name=name).exists():
            raise KioskRefused(f"Kiosk {name!r} is already revoked.")
        raise KioskRefused(f"There is no kiosk named {name!r}.")
    return KioskDevice.objects.get(name=name)


def kiosk_for_token(token: str | None) -> KioskDevice | None:
    """The enrolled, unrevoked device this cookie belongs to, or None."""
    if not token or len(token) > TOKEN_MAX_CHARS:
        return None
    return KioskDevice.objects.filter(
        token_hash=token_hash(token), revoked_at__isnull=True, enrolled_at__isnull=False
    ).first()


def _enrolment_deadline():
    return timezone.now() + timedelta(hours=settings.ARENA_KIOSK_ENROLMENT_HOURS)
