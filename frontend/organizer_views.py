"""The organizer dashboard: staff only, read-only, one page built by `organizer_dashboard`."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from frontend.organizer import organizer_dashboard


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous visitors go to the admin login; signed-in people who are not staff get 403."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not (request.user.is_active and request.user.is_staff):
            raise PermissionDenied("The organizer dashboard is for staff only.")
        return view(request, *args, **kwargs)

    return guarded


@require_GET
@staff_only
def dashboard(request: HttpRequest) -> HttpResponse:
    board = organizer_dashboard(jobs_agent=request.GET.get("agent", ""))
    return render(request, "organizer/dashboard.html", {"board": board})
