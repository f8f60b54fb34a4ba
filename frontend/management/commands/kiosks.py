from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from arena.battles.kiosks import (
    KioskEnrolment,
    KioskRefused,
    kiosk_reenrol,
    kiosk_register,
    kiosk_revoke,
)
from arena.battles.models import KioskDevice


class Command(BaseCommand):
    help = (
        "The booth's kiosk devices (frontend/README.md): add one and print its one-time "
        "enrolment link, list them, give one a new link, or revoke one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="register a device; prints its enrolment link")
        add.add_argument("name")
        reenrol = actions.add_parser("reenrol", help="a new enrolment link for a device")
        reenrol.add_argument("name")
        revoke = actions.add_parser("revoke", help="stop a device's token now")
        revoke.add_argument("name")
        actions.add_parser("list", help="every device and its state")
        for sub in (add, reenrol):
            sub.add_argument(
                "--url",
                default=settings.ARENA_PUBLIC_URL,
                help="the arena's address, as seen from the kiosk (default: ARENA_PUBLIC_URL)",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "add":
                self._print_link(kiosk_register(name=options["name"]), options["url"])
            elif action == "reenrol":
                self._print_link(kiosk_reenrol(name=options["name"]), options["url"])
            elif action == "revoke":
                device = kiosk_revoke(name=options["name"])
                self.stdout.write(f"Revoked kiosk {device.name}: its screen is refused from now.")
            else:
                for device in KioskDevice.objects.order_by("name"):
                    battles = device.battles.count()
                    self.stdout.write(f"{device.name}\t{device.status}\t{battles} battles")
        except KioskRefused as refused:
            raise CommandError(str(refused)) from None

    def _print_link(self, enrolment: KioskEnrolment, url: str) -> None:
        link = url.rstrip("/") + reverse("kiosk-enrol", args=[enrolment.enrolment_token])
        expires = enrolment.device.enrolment_expires_at
        self.stdout.write(
            f"Kiosk {enrolment.device.name}: open this link once, on the kiosk itself, "
            f"before {expires:%Y-%m-%d %H:%M} UTC:\n{link}"
        )
