"""The booth's kiosk: the blind battle page for one shared, registered screen (frontend/README.md).

Thin: who the device is comes from `kiosk_of_request`, the voter's renewal from
`frontend.voters`, enrolment from `arena.battles.kiosks`.
"""

from __future__ import annotations

import functools
import io
import time

import segno
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from arena.battles.kiosks import kiosk_enrol
from arena.competition.selectors import arena_settings_current
from frontend.views import VOTE_LABELS
from frontend.voters import KIOSK_COOKIE, SESSION_KIOSK_SEEN, kiosk_of_request, voter_renew

# The device token lives as long as the booth: a conference, with room to spare. It is
# revoked on the server (`manage.py kiosks revoke`), not by letting it expire.
KIOSK_COOKIE_MAX_AGE = 400 * 24 * 3600


@require_GET
@ensure_csrf_cookie
@never_cache
def kiosk_page(request: HttpRequest) -> HttpResponse:
    kiosk = kiosk_of_request(request)
    if kiosk is None:
        return render(request, "frontend/kiosk_refused.html", status=403)
    # Opening (or reloading) the kiosk is a cleared screen: the next person is a new voter.
    voter_renew(request.session)
    request.session[SESSION_KIOSK_SEEN] = time.time()
    return render(
        request,
        "frontend/kiosk.html",
        {
            "kiosk": kiosk,
            "prompt_max_chars": settings.ARENA_PROMPT_MAX_CHARS,
            "max_turns": arena_settings_current().max_turns,
            "vote_labels": VOTE_LABELS,
            "idle_ms": round(settings.ARENA_KIOSK_IDLE_SECONDS * 1000),
            "reveal_ms": round(settings.ARENA_KIOSK_REVEAL_SECONDS * 1000),
            "public_url": settings.ARENA_PUBLIC_URL,
        },
    )


@require_POST
def kiosk_next_voter(request: HttpRequest) -> JsonResponse:
    """The kiosk page clears its screen (after the reveal, or when idle): a new voter."""
    if kiosk_of_request(request) is None:
        return JsonResponse(
            {"error": "This device is not a registered kiosk.", "code": "not_a_kiosk"}, status=403
        )
    voter_renew(request.session)
    request.session[SESSION_KIOSK_SEEN] = time.time()
    return JsonResponse({"renewed": True})


@require_http_methods(["GET", "POST"])
@never_cache
def kiosk_enrolment(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows a button; only the POST spends the one-time link, so a chat app or a mail
    scanner that previews the link does not enrol itself instead of the booth's screen."""
    if request.method == "GET":
        return render(request, "frontend/kiosk_enrol.html")
    enrolled = kiosk_enrol(enrolment_token=token)
    if enrolled is None:
        return render(request, "frontend/kiosk_enrol.html", {"spent": True}, status=403)
    _device, device_token = enrolled
    response = redirect("kiosk")
    response.set_cookie(
        KIOSK_COOKIE,
        device_token,
        max_age=KIOSK_COOKIE_MAX_AGE,
        httponly=True,
        secure=request.is_secure(),
        samesite="Lax",
    )
    return response


@require_GET
def kiosk_qr(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(_qr_svg(settings.ARENA_PUBLIC_URL), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=300"
    return response


@functools.lru_cache(maxsize=4)
def _qr_svg(url: str) -> bytes:
    # Error correction M survives a smudged or partly glared screen; drawn once per URL.
    code = segno.make(url, error="m", micro=False)
    out = io.BytesIO()
    code.save(out, kind="svg", scale=10, border=2, xmldecl=False, title=f"QR code: {url}")
    return out.getvalue()
