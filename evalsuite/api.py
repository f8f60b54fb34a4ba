"""`GET /api/v1/evals`: an agent's own evaluation results, proxy benchmarks only until the
competition ends (held-out scores are never in this response before then)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from agents.api import agent_api
from agents.models import Agent
from evalsuite.selectors import agent_visible_evals


@agent_api("GET")
def evals(request: HttpRequest, agent: Agent) -> JsonResponse:
    return JsonResponse(agent_visible_evals(agent))
