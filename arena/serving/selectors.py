from __future__ import annotations

from arena.serving.client import Endpoint
from arena.serving.models import Contestant


def contestants_active() -> list[Contestant]:
    return list(Contestant.objects.filter(active=True, weight__gt=0))


def contestant_endpoint(contestant: Contestant) -> Endpoint:
    return Endpoint(
        base_url=contestant.base_url,
        model=contestant.served_model_name,
        api_key=contestant.api_key,
    )
