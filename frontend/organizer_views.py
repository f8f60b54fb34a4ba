"""The organizer's pages: staff only, read-only, each rendering what its builder in
`organizer_pages.py` returns. The shared navigation is `organizer/nav.html`."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from frontend import organizer_pages
from frontend.live import agents_watched


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
def phases(request: HttpRequest) -> HttpResponse:
    if "agent" in request.GET:  # the one-page dashboard's job filter: the jobs moved
        query = urlencode({"agent": request.GET["agent"]})
        return redirect(f"{reverse('organizer-cluster')}?{query}#jobs")
    page = organizer_pages.phases_page()
    return render(request, "organizer/phases.html", {"page": page, "nav": "phases"})


@require_GET
@staff_only
def agents(request: HttpRequest) -> HttpResponse:
    page = organizer_pages.agents_page(watched=agents_watched())
    return render(request, "organizer/agents.html", {"page": page, "nav": "agents"})


@require_GET
@staff_only
def agent(request: HttpRequest, name: str) -> HttpResponse:
    page = organizer_pages.agent_page(name=name)
    if page is None:
        raise Http404("No such agent.")
    return render(
        request, "organizer/agent.html", {"page": page, "nav": "agents", "nav_agent": name}
    )


@require_GET
@staff_only
def cluster(request: HttpRequest) -> HttpResponse:
    page = organizer_pages.cluster_page(jobs_agent=request.GET.get("agent", ""))
    return render(request, "organizer/cluster.html", {"page": page, "nav": "cluster"})


@require_GET
@staff_only
def evaluation(request: HttpRequest) -> HttpResponse:
    sections = organizer_pages.evaluation_page()
    return render(request, "organizer/evaluation.html", {"sections": sections, "nav": "evaluation"})


@require_GET
@staff_only
def audit(request: HttpRequest) -> HttpResponse:
    sections = organizer_pages.audit_page()
    return render(request, "organizer/audit.html", {"sections": sections, "nav": "audit"})
