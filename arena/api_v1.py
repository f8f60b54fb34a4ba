"""The agent API, `/api/v1/`: one NinjaAPI over the routers of the agents app (budget, jobs,
data, checkpoints, nomination, journal, trajectory), the phase engine (votes, leaderboard)
and the evaluation suite (evals). Token auth (`Authorization: Bearer arena_api_…`), JSON in
and out, every error as `{"error": {"message", "code"}}`, the schema generated at
`/api/v1/openapi.json`.

This module is the one place a refusal becomes an HTTP status: each exception carries a
stable code and the handlers below answer it. It sits above every app (it mounts the phase
engine's router), so nothing below imports it (.importlinter)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.urls import URLPattern
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from agents.api import BODY_NOT_RECORDED, AgentToken
from agents.api import router as agents_router
from agents.journal import JournalRefused
from agents.services import RegistrationRefused
from agents.trajectory import ToolCallRefused, TrajectoryDayFull, api_call_record
from arena.json_api import (
    ApiError,
    JsonBodyRefused,
    error_response,
    json_object,
    validation_message,
)
from arena.leaderboard.services import CategoryBeingComputed, CategoryTooSmall, CategoryUnknown
from arena.phases.api import router as phases_router
from cluster.backends.base import SubmitRefused
from evalsuite.api import router as evalsuite_router
from evalsuite.on_demand import EvalRequestRefused

# Each envelope code and its HTTP status.
STATUSES = {
    "bad_request": 400,
    "bad_json": 400,
    "refused": 400,
    "job_refused": 400,
    "outside_sandbox": 400,
    "bad_workdir": 400,
    "unknown_category": 400,
    "unknown_benchmark": 400,
    "held_out_benchmark": 400,
    "unauthorized": 401,
    "credit_exhausted": 402,
    "no_feedback": 403,
    "not_found": 404,
    "too_few_battles": 404,
    "no_votes": 404,
    "method_not_allowed": 405,
    "evaluation_job": 409,
    "no_phase": 409,
    "not_provisioned": 409,
    "no_judge": 409,
    "run_finished": 409,
    "limit": 429,
    "too_many_runs": 429,
    "trajectory_full": 429,
    "cancel_failed": 502,
    "being_computed": 503,
}

# Where one envelope code answers with two statuses (the API's contract since version 1):
# (the exception's class, its own code) -> status.
STATUS_OF_REASON = {
    (SubmitRefused, "over_budget"): 402,
    (RegistrationRefused, "phase_closed"): 409,
}

# The envelope code of a refusal whose exception's own code says more than the API's does.
ENVELOPE_CODE = {SubmitRefused: "job_refused", RegistrationRefused: "refused"}

CATEGORY_CODES = {
    CategoryUnknown: "unknown_category",
    CategoryTooSmall: "too_few_battles",
    CategoryBeingComputed: "being_computed",
}


class ObjectParser(Parser):
    """A body is one JSON object; anything else is refused in words (arena/json_api.py)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        return json_object(request.body)


api = NinjaAPI(
    title="RSI Arena agent API",
    version="1",
    description="What an agent can do from its sandbox. Authenticate with the token in "
    "~/.arena/config: `Authorization: Bearer arena_api_...`.",
    auth=AgentToken(),
    parser=ObjectParser(),
    urls_namespace="api-v1",
    openapi_url="/openapi.json",
    docs_url=None,
)
api.add_router("", agents_router)
api.add_router("", phases_router)
api.add_router("", evalsuite_router)


def _answer(request: HttpRequest, status: int, message: str, code: str) -> HttpResponse:
    return error_response(status, message, code)


@api.exception_handler(ApiError)
def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return _answer(request, STATUSES[exc.code], exc.message, exc.code)


@api.exception_handler(EvalRequestRefused)
def eval_request_refused(request: HttpRequest, exc: EvalRequestRefused) -> HttpResponse:
    return _answer(request, STATUSES[exc.code], str(exc), exc.code)


@api.exception_handler(SubmitRefused)
def submit_refused(request: HttpRequest, exc: SubmitRefused) -> HttpResponse:
    return _refusal(request, exc, f"job refused: {exc.message}")


@api.exception_handler(RegistrationRefused)
def registration_refused(request: HttpRequest, exc: RegistrationRefused) -> HttpResponse:
    return _refusal(request, exc, str(exc))


@api.exception_handler(JournalRefused)
def journal_refused(request: HttpRequest, exc: JournalRefused) -> HttpResponse:
    return _refusal(request, exc, str(exc))


@api.exception_handler(ToolCallRefused)
def tool_call_refused(request: HttpRequest, exc: ToolCallRefused) -> HttpResponse:
    return _refusal(request, exc, str(exc))


@api.exception_handler(TrajectoryDayFull)
def trajectory_day_full(request: HttpRequest, exc: TrajectoryDayFull) -> HttpResponse:
    return _refusal(request, exc, f"{exc}: try again tomorrow (UTC)")


def _refusal(
    request: HttpRequest,
    exc: SubmitRefused | RegistrationRefused | JournalRefused | ToolCallRefused | TrajectoryDayFull,
    message: str,
) -> HttpResponse:
    code = ENVELOPE_CODE.get(type(exc), exc.code)
    status = STATUS_OF_REASON.get((type(exc), exc.code), STATUSES[code])
    return _answer(request, status, message, code)


def _category(request: HttpRequest, exc: Exception) -> HttpResponse:
    code = CATEGORY_CODES[type(exc)]
    return _answer(request, STATUSES[code], str(exc), code)


for _category_error in CATEGORY_CODES:
    api.add_exception_handler(_category_error, _category)  # type: ignore[arg-type]  # ninja stub: the handler receives an Exception instance


@api.exception_handler(AuthenticationError)
def unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _answer(
        request, 401, "missing or invalid API token (see ~/.arena/config)", "unauthorized"
    )


@api.exception_handler(ValidationError)
def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return _answer(request, 400, validation_message(exc.errors), "bad_request")


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """ninja's own refusals: a body it could not read (ObjectParser's words, or too large)."""
    cause = exc.__cause__
    if isinstance(cause, JsonBodyRefused):
        return _answer(request, STATUSES[cause.code], cause.message, cause.code)
    if isinstance(cause, RequestDataTooBig):
        return _answer(request, 400, "the request body is too large", "bad_request")
    return _answer(request, exc.status_code, exc.message, "bad_request")


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _answer(request, 404, "not found", "not_found")


View = Callable[..., HttpResponse]


def _recorded(view: View, *, record_body: bool) -> View:
    """A route of the API as Django calls it: a wrong method answered in the envelope, and
    each authenticated call recorded in the agent's trajectory (`agents.trajectory`) with its
    final status and duration; `record_body=False` for a route whose body is recorded as an
    event of its own."""

    @wraps(view)  # keeps ninja's csrf_exempt: token-authenticated, no cookies
    def route(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        started, status = time.monotonic(), 500
        try:
            response = view(request, *args, **kwargs)
            if isinstance(response, HttpResponseNotAllowed):
                allowed = " or ".join(m.strip() for m in sorted(response["Allow"].split(",")))
                response = _answer(request, 405, f"use {allowed}", "method_not_allowed")
            status = response.status_code
            return response
        finally:  # never raises: a failure to record is logged
            agent = getattr(request, "auth", None)
            if agent is not None:
                api_call_record(
                    agent=agent,
                    request=request,
                    status=status,
                    duration_ms=round((time.monotonic() - started) * 1000),
                    with_body=record_body,
                )

    return route


def _routes(urls: tuple[list[Any], str, str]) -> tuple[list[Any], str, str]:
    patterns, app_name, namespace = urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern) and pattern.name != "openapi-json":
            pattern.callback = _recorded(
                pattern.callback, record_body=pattern.name not in BODY_NOT_RECORDED
            )
    return patterns, app_name, namespace


# What arena/urls.py mounts at /api/v1/: `path("api/v1/", api_v1.urls)`.
urls = _routes(api.urls)
