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


def contestant_identity_words(contestant: Contestant) -> list[str]:
    """Everything that would give this contestant away if an answer said it."""
    words = [contestant.display_name, contestant.served_model_name, *contestant.identity_words]
    if contestant.checkpoint_path:
        words.append(contestant.checkpoint_path)
    return [word for word in words if word.strip()]
