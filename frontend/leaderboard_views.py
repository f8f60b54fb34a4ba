"""Leaderboard pages: the public table, its JSON, its plots, and the live conference screen.

A contestant whose agent has a confirmed rule violation is marked on the table and in the JSON
(`confirmed_violations`); its human rating is left as the votes made it. The leaderboard
(`arena`) knows nothing of audits: this page joins the two.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import global_snapshot_latest
from arena.leaderboard.services import leaderboard_refresh
from frontend.plots import interval_plot_svg, winrate_heatmap_svg
from safety.selectors import contestant_violations


def _current() -> RatingSnapshot | None:
    # A no-op unless a vote arrived since the last fit, and at most one refit a second however
    # many pages are viewed (see leaderboard_refresh).
    leaderboard_refresh(holder="page")
    return global_snapshot_latest()


def _table(snapshot: RatingSnapshot | None, kind: str) -> dict | None:
    if snapshot is None:
        return None
    return snapshot.raw if kind == "raw" or snapshot.style is None else snapshot.style


def _kind(request: HttpRequest) -> str:
    return "raw" if request.GET.get("kind") == "raw" else "style"


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    snapshot = _current()
    kind = _kind(request)
    table = _table(snapshot, kind)
    violations = contestant_violations() if table else {}
    rows = [
        {**row, "violations": ", ".join(violations.get(row["model"], []))}
        for row in (table or {}).get("scores", [])
    ]
    return render(
        request,
        "frontend/leaderboard.html",
        {
            "snapshot": snapshot,
            "table": table,
            "rows": rows,
            "kind": kind,
            "any_violation": any(row["violations"] for row in rows),
        },
    )


@require_GET
def leaderboard_json(request: HttpRequest) -> JsonResponse:
    snapshot = _current()
    if snapshot is None:
        return JsonResponse({"n_battles": 0, "style": None, "raw": None, "analyses": {}})
    return JsonResponse(
        {
            "computed_at": snapshot.created_at.isoformat(),
            "source": snapshot.source,
            "n_battles": snapshot.n_battles,
            "style": snapshot.style,
            "raw": snapshot.raw,
            "analyses": snapshot.analyses,
            "exclusions": snapshot.exclusions,
            # rated model -> the rules its agent was confirmed to have broken (rating unchanged)
            "confirmed_violations": _rated_violations(snapshot),
        }
    )


def _rated_violations(snapshot: RatingSnapshot) -> dict[str, list[str]]:
    tables = [table for table in (snapshot.style, snapshot.raw) if table]
    rated = {row["model"] for table in tables for row in table.get("scores", [])}
    return {name: rules for name, rules in contestant_violations().items() if name in rated}


@require_GET
def interval_plot(request: HttpRequest) -> HttpResponse:
    kind = _kind(request)
    table = _table(_current(), kind)
    title = "Style-controlled scores" if kind == "style" else "Raw Bradley–Terry scores"
    svg = interval_plot_svg(table["scores"] if table else [], title=f"{title}, 95% intervals")
    return HttpResponse(svg, content_type="image/svg+xml")


@require_GET
def winrate_heatmap(request: HttpRequest) -> HttpResponse:
    snapshot = _current()
    analyses = snapshot.analyses if snapshot else {}
    svg = winrate_heatmap_svg(
        analyses.get("models", []),
        analyses.get("pair_win_rate", []),
        analyses.get("pair_battles", []),
        title="Observed win rate of row against column (ties count half)",
    )
    return HttpResponse(svg, content_type="image/svg+xml")


@require_GET
def live_leaderboard_page(request: HttpRequest) -> HttpResponse:
    return render(request, "frontend/leaderboard_live.html")
