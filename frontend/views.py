"""Voter-facing pages and JSON endpoints. Thin: parse, call one service, shape the reply.

Nothing here returns a contestant's identity before the battle's vote is recorded.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST

from arena.battles.selectors import prompt_suggest
from arena.battles.services import BattleRefused, battle_create, follow_up_create, vote_record
from arena.competition.selectors import arena_settings_current
from arena.json_api import JsonBodyRefused, error_response, json_object
from frontend.voters import (
    SESSION_KIOSK_SEEN,
    ensure_voter,
    ip_hash,
    kiosk_of_request,
    kiosk_voter,
    voter_key_or_none,
    voter_renew,
)

VOTE_LABELS = [
    ("a", "A is better"),
    ("b", "B is better"),
    ("tie", "Tie"),
    ("bothbad", "Both are bad"),
]


@require_GET
@ensure_csrf_cookie
def arena_page(request: HttpRequest) -> HttpResponse:
    ensure_voter(request.session)
    return render(
        request,
        "frontend/arena.html",
        {
            "prompt_max_chars": settings.ARENA_PROMPT_MAX_CHARS,
            "max_turns": arena_settings_current().max_turns,
            "vote_labels": VOTE_LABELS,
        },
    )


@require_GET
def suggest_prompt(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"prompt": prompt_suggest()})


@require_POST
def start_battle(request: HttpRequest) -> JsonResponse:
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        return _error("Please type a prompt first.", "empty_prompt", 400)
    kiosk = kiosk_of_request(request)
    if kiosk is not None:
        voter_key = kiosk_voter(
            request.session, now=time.time(), idle_seconds=settings.ARENA_KIOSK_IDLE_SECONDS
        )
    else:
        voter_key = ensure_voter(request.session)
    try:
        battle = battle_create(
            prompt=prompt,
            voter_key=voter_key,
            ip_hash=ip_hash(request.META.get("REMOTE_ADDR")),
            kiosk=kiosk,
        )
    except BattleRefused as refused:
        return _error(refused.message, refused.code, refused.status)
    return JsonResponse({"battle": battle.pk, "socket": f"/ws/battles/{battle.pk}/"}, status=201)


@require_POST
def follow_up(request: HttpRequest, battle_id: str) -> JsonResponse:
    """The voter's next prompt to both models, before the vote; its answers stream on the
    battle's socket as the first ones did."""
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    if kiosk_of_request(request) is not None:
        # As when a battle starts: a kiosk voter idle too long has walked away, and the next
        # person at the screen is a new voter, to whom the old battle does not belong.
        voter_key: str | None = kiosk_voter(
            request.session, now=time.time(), idle_seconds=settings.ARENA_KIOSK_IDLE_SECONDS
        )
    else:
        voter_key = voter_key_or_none(request.session)
    if voter_key is None:
        return _error("Your session has expired; please start a new battle.", "no_session", 403)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        return _error("Please type a prompt first.", "empty_prompt", 400)
    try:
        created = follow_up_create(
            battle_id=battle_id,
            prompt=prompt,
            voter_key=voter_key,
            ip_hash=ip_hash(request.META.get("REMOTE_ADDR")),
        )
    except BattleRefused as refused:
        return _error(refused.message, refused.code, refused.status)
    return JsonResponse(
        {"battle": battle_id, "turn": created.turn, "socket": f"/ws/battles/{battle_id}/"},
        status=201,
    )


@require_POST
def vote(request: HttpRequest, battle_id: str) -> JsonResponse:
    body = _json_body(request)
    if isinstance(body, JsonResponse):
        return body
    voter_key = voter_key_or_none(request.session)
    if voter_key is None:
        return _error("Your session has expired; please start a new battle.", "no_session", 403)
    choice = body.get("choice")
    try:
        outcome = vote_record(
            battle_id=battle_id,
            choice=choice if isinstance(choice, str) else "",
            voter_key=voter_key,
            ip_hash=ip_hash(request.META.get("REMOTE_ADDR")),
        )
    except BattleRefused as refused:
        return _error(refused.message, refused.code, refused.status)
    if kiosk_of_request(request) is not None:
        # One vote per person at a booth: whoever touches the screen next is a new voter, even
        # before the kiosk's page clears the reveal.
        voter_renew(request.session)
        request.session[SESSION_KIOSK_SEEN] = time.time()
    if outcome.counted and outcome.leaked_side:
        side = outcome.leaked_side.upper()
        message = (
            f"Thank you! Answer {side} revealed who wrote it, so this battle counts as a loss "
            f"for {side} whatever the vote."
        )
    elif outcome.counted:
        message = "Thank you! Your vote counts."
    else:
        message = (
            f"Thank you — but this battle does not count: {outcome.void_reason}. "
            "Answers must not reveal who wrote them."
        )
    return JsonResponse(
        {
            "battle": outcome.battle_id,
            "choice": outcome.choice,
            "counted": outcome.counted,
            "message": message,
            "reveal": outcome.reveal,
        }
    )


def _json_body(request: HttpRequest) -> dict[str, Any] | JsonResponse:
    if request.content_type == "application/json":
        try:
            return json_object(request.body)
        except JsonBodyRefused as refused:
            return _error(refused.message, "bad_json", 400)
    return request.POST.dict()


def _error(message: str, code: str, status: int) -> JsonResponse:
    return error_response(status, message, code, flat=True)
