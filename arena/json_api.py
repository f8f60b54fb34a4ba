"""What every JSON endpoint of the site shares: reading a request body as one JSON object, the
error envelope, and the agent API's typed refusal. A base module: it imports no app, so the
agent API (arena/api_v1.py and each app's api.py) and the voters' pages (frontend/views.py)
use the same functions."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from django.http import JsonResponse
from pydantic import BaseModel, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

# The `type` of a pydantic error whose message is already said for the agent, whole.
SAID = "arena_said"


class JsonBodyRefused(ValueError):
    """A request body that is not one JSON object; `code` is the envelope's."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ApiError(Exception):
    """A refusal by an API endpoint itself (not found, not allowed now, a path outside the
    sandbox). `code` is stable and the envelope's; the API's exception handlers give each
    code its HTTP status (arena/api_v1.py), so no view picks a status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):  # 1e400 reads as inf
        raise ValueError(f"{number[:32]} is out of range")
    return value


def strict_json_loads(raw: bytes | str) -> Any:
    """JSON as RFC 8259 has it, or ValueError: Python's json takes NaN and Infinity, which
    PostgreSQL's jsonb then refuses (a body recorded in a trajectory would vanish), and a deeply
    nested or 5,000-digit body raises RecursionError or ValueError of its own."""
    try:
        return json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object (an empty body is `{}`), or JsonBodyRefused."""
    try:
        body = strict_json_loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise JsonBodyRefused("the request body is not valid JSON", code="bad_json") from None
    if not isinstance(body, dict):
        raise JsonBodyRefused("the request body must be a JSON object", code="bad_request")
    return body


def error_response(status: int, message: str, code: str, *, flat: bool = False) -> JsonResponse:
    """The error envelope: `{"error": {"message", "code"}}` (the agent API's contract), or with
    `flat` the voters' pages' `{"error": message, "code"}`, which their scripts read."""
    if flat:
        return JsonResponse({"error": message, "code": code}, status=status)
    return JsonResponse({"error": {"message": message, "code": code}}, status=status)


def said(message: str) -> WrapValidator:
    """A field validator that answers any bad value of its field with `message`, whole (e.g.
    "'env' must map names to strings"), instead of pydantic's own words."""

    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(SAID, message) from None

    return WrapValidator(validate)


def validation_message(errors: list[dict[str, Any]]) -> str:
    """One sentence for a request that did not validate, naming the field: a message a
    schema said (`said`) as it is, else pydantic's words after the field's name."""
    first = errors[0]
    if first.get("type") == SAID:
        return str(first["msg"])
    # loc is ("body", <parameter>, field, ...) or ("query", field): the field is what follows
    fields = [str(part) for part in first.get("loc", ())[1:] if isinstance(part, str | int)]
    if first.get("loc", ("",))[0] == "body" and fields:
        fields = fields[1:]
    where = ".".join(fields)
    if first.get("type") == "missing":
        return f"'{where}' is required" if where else "the request body is required"
    return f"'{where}': {first['msg']}" if where else str(first["msg"])


class ErrorDetail(BaseModel):
    message: str
    code: str


class ErrorEnvelope(BaseModel):
    """Every refusal of the agent API: `{"error": {"message", "code"}}`."""

    error: ErrorDetail


# What any route may answer: a body that does not validate, no valid token, a wrong method.
COMMON_ERRORS = (400, 401, 405)


def replies(ok: dict[int, Any], *errors: int) -> dict[int, Any]:
    """A route's `response=`: its success and, in the envelope, the errors it may answer."""
    return {**ok, **{status: ErrorEnvelope for status in sorted({*COMMON_ERRORS, *errors})}}
