from __future__ import annotations

from datetime import datetime

from arena.serving.client import Endpoint
from arena.serving.models import Contestant, ServingEvent


def contestants_active() -> list[Contestant]:
    return list(Contestant.objects.filter(active=True, weight__gt=0))


def contestant_endpoint(contestant: Contestant) -> Endpoint:
    return Endpoint(
        base_url=contestant.base_url,
        model=contestant.served_model_name,
        api_key=contestant.api_key,
    )


def serving_events_recent(*, since: datetime, limit: int = 20) -> list[ServingEvent]:
    """The latest changes to the arena's model servers, newest first (the organizers' view)."""
    return list(ServingEvent.objects.filter(at__gte=since).select_related("contestant")[:limit])
