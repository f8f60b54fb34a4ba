from __future__ import annotations

from django.db import transaction

from arena.serving.backends import ServerChange
from arena.serving.client import Endpoint
from arena.serving.models import Contestant, ServingEvent


@transaction.atomic
def contestant_register(
    *,
    display_name: str,
    endpoint: Endpoint,
    checkpoint_path: str = "",
    weight: float = 1.0,
    identity_words: list[str] | None = None,
    active: bool = True,
) -> Contestant:
    """Create or update the contestant called `display_name` to point at `endpoint`."""
    if weight < 0:
        raise ValueError("a sampling weight cannot be negative")
    contestant, _ = Contestant.objects.update_or_create(
        display_name=display_name,
        defaults={
            "base_url": endpoint.base_url,
            "served_model_name": endpoint.model,
            "api_key": endpoint.api_key,
            "checkpoint_path": checkpoint_path,
            "weight": weight,
            "identity_words": identity_words or [],
            "active": active,
        },
    )
    return contestant


def contestants_deactivate(*, display_names: list[str]) -> int:
    return Contestant.objects.filter(display_name__in=display_names).update(active=False)


def serving_event_record(*, contestant_id: int, change: ServerChange) -> ServingEvent:
    return ServingEvent.objects.create(
        contestant_id=contestant_id,
        kind=change.kind,
        reason=change.reason[:500],
        detail=change.detail[:500],
    )
