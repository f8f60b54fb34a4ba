"""The organizer's voter screening: flagged sessions and networks with their evidence, and the
exclusions — made, shown and lifted here (`/organizer/voters/`) or with `manage.py voters`."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from arena.battles.selectors import voter_exclusions_latest
from arena.battles.services import ExclusionRefused, voter_exclusion_lift
from arena.leaderboard.screening import voter_screening
from arena.leaderboard.services import voter_exclude_on_screening
from frontend.organizer import OrganizerSection
from frontend.organizer_views import staff_only

SHOWN_KEY = 12
EXCLUSIONS_SHOWN = 200


def voter_sections() -> list[OrganizerSection]:
    """The dashboard's summary: each flagged voter and its signals (details on the page)."""
    flagged = voter_screening()
    rows = [
        [
            f.kind,
            f.key[:SHOWN_KEY],
            str(f.votes),
            "; ".join(f"{s.name}: {s.detail}" for s in f.signals),
            f"excluded (#{f.exclusion_id})" if f.exclusion_id else "counted",
        ]
        for f in flagged
    ]
    if not rows:
        return []
    return [
        OrganizerSection(
            title="Flagged voters",
            columns=["Kind", "Voter", "Votes", "Evidence", "Status"],
            rows=rows,
            note="Voters whose votes do not look like people's (exclude one from the fit on "
            "/organizer/voters/, or with `manage.py voters`).",
        )
    ]


@require_http_methods(["GET", "POST"])
@staff_only
def voters_page(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        who = request.user.get_username() or "staff"
        try:
            if request.POST.get("action") == "exclude":
                exclusion, _ = voter_exclude_on_screening(
                    kind=request.POST.get("kind", ""),
                    key=request.POST.get("key", ""),
                    reason=request.POST.get("reason", ""),
                    excluded_by=who,
                )
                messages.success(request, f"Excluded as #{exclusion.pk}.")
            elif request.POST.get("action") == "lift":
                lifted = voter_exclusion_lift(
                    exclusion_id=int(request.POST.get("exclusion", "0") or 0),
                    lifted_by=who,
                    reason=request.POST.get("reason", ""),
                )
                messages.success(request, f"Lifted exclusion #{lifted.pk}.")
            else:
                messages.error(request, "Unknown action.")
        except (ExclusionRefused, ValueError) as refused:
            messages.error(request, str(refused))
        return redirect("organizer-voters")
    return render(
        request,
        "organizer/voters.html",
        {
            "flagged": voter_screening(),
            "exclusions": voter_exclusions_latest(limit=EXCLUSIONS_SHOWN),
            "shown_key": SHOWN_KEY,
            "nav": "voters",
        },
    )
