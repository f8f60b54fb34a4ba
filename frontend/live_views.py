"""The agents' livestream pages: the organizer's (staff, live) and the public's (delayed).

A page carries its latest `PAGE_EVENTS` events; the socket sends the rest as they come
(`live_consumers.py`); `…/events?before=ID` pages back and `…/events?after=ID` catches up, a
page of events at a time. The public routes hold every read to now − delay, here and in the
socket, and answer 404 while the competition has the public view off.
"""

from __future__ import annotations

import datetime as dt

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from agents.models import Agent
from agents.trajectory_live import (
    PAGE_EVENTS,
    event_frame,
    events_after,
    events_before,
    events_latest,
)
from frontend.live import journal_latest, live_budget, public_delay
from frontend.organizer_views import staff_only


def _int_param(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 19:
        raise ValueError(f"'{name}' must be an event id (a whole number)")
    return int(raw)


def _events_json(
    request: HttpRequest, agent: Agent, *, public: bool, until: dt.datetime | None
) -> JsonResponse:
    try:
        before, after = _int_param(request, "before"), _int_param(request, "after")
    except ValueError as bad:
        return JsonResponse({"error": str(bad), "code": "bad_id"}, status=400)
    more = False
    if before is not None:
        events = events_before(agent, before_id=before, until=until)
        more = len(events) == PAGE_EVENTS
    elif after is not None:
        events, more = events_after(agent, after_id=after, until=until)
    else:
        events = events_latest(agent, until=until)
    return JsonResponse(
        {"events": [event_frame(event, public=public) for event in events], "more": more}
    )


# -- organizers ------------------------------------------------------------------------------


@require_GET
@staff_only
def agent_live(request: HttpRequest, name: str) -> HttpResponse:
    agent = get_object_or_404(Agent, name=name)
    initial = {
        "agent": agent.name,
        "public": False,
        "events": [event_frame(event) for event in events_latest(agent)],
        "budget": live_budget(agent),
        "journal": journal_latest(agent),
        "socket": f"/ws/organizer/agents/{agent.name}/live/",
        "events_url": reverse("organizer-agent-live-events", args=[agent.name]),
        "page_events": PAGE_EVENTS,
    }
    return render(request, "frontend/agent_live.html", {"agent": agent, "initial": initial})


@require_GET
@staff_only
def agent_live_events(request: HttpRequest, name: str) -> JsonResponse:
    agent = get_object_or_404(Agent, name=name)
    return _events_json(request, agent, public=False, until=None)


# -- the public, delayed ---------------------------------------------------------------------


def _public_agent(name: str) -> tuple[Agent, dt.datetime, int]:
    """The agent, the newest moment the public may see of it now, and the delay in minutes."""
    delay = public_delay(name)
    if delay is None:
        raise Http404("This agent's livestream is not public.")
    agent = get_object_or_404(Agent, name=name)
    return agent, timezone.now() - delay, int(delay.total_seconds() // 60)


@require_GET
def public_live(request: HttpRequest, name: str) -> HttpResponse:
    agent, cutoff, delay_minutes = _public_agent(name)
    initial = {
        "agent": agent.name,
        "public": True,
        "delay_minutes": delay_minutes,
        "events": [event_frame(e, public=True) for e in events_latest(agent, until=cutoff)],
        "budget": [],
        "journal": journal_latest(agent, until=cutoff),
        "socket": f"/ws/live/agents/{agent.name}/",
        "events_url": reverse("public-agent-live-events", args=[agent.name]),
        "page_events": PAGE_EVENTS,
    }
    return render(
        request,
        "frontend/agent_live.html",
        {"agent": agent, "initial": initial, "delay_minutes": delay_minutes},
    )


@require_GET
def public_live_events(request: HttpRequest, name: str) -> JsonResponse:
    agent, cutoff, _ = _public_agent(name)
    return _events_json(request, agent, public=True, until=cutoff)
