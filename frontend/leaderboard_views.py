"""Leaderboard pages: the public table, its JSON, its plots, and the live conference screen.

A contestant whose agent has a confirmed rule violation is marked on the table and in the JSON
(`confirmed_violations`); its human rating is left as the votes made it. The leaderboard
(`arena`) knows nothing of audits: this page joins the two.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from arena.battles.categories import CATEGORIES, LABELS
from arena.leaderboard.models import RatingSnapshot
from arena.leaderboard.selectors import global_snapshot_latest
from arena.leaderboard.services import (
    CategoryBeingComputed,
    CategoryTooSmall,
    CategoryUnknown,
    category_check,
    category_leaderboard,
    leaderboard_refresh,
)
from frontend.plots import interval_plot_svg, winrate_heatmap_svg
from safety.selectors import contestant_violations


def _current() -> RatingSnapshot | None:
    # A no-op unless a vote arrived since the last fit, and at most one refit a second however
    # many pages are viewed (see leaderboard_refresh).
    leaderboard_refresh(holder="page")
    return global_snapshot_latest()


class _Board:
    """What a request asks for: every battle's board or one category's, as a snapshot, or
    the reason there is no table (too few battles in the category)."""

    def __init__(self, request: HttpRequest) -> None:
        name = request.GET.get("category", "")
        self.category = category_check(name) if name else ""  # CategoryUnknown: a 400
        self.withheld = ""
        self.snapshot: RatingSnapshot | None = None
        if not self.category:
            self.snapshot = _current()
            return
        try:
            self.snapshot = category_leaderboard(category=self.category)
        except (CategoryTooSmall, CategoryBeingComputed) as exc:
            self.withheld = f"{str(exc)[0].upper()}{str(exc)[1:]}."


def _unknown_category(request: HttpRequest, exc: CategoryUnknown) -> HttpResponse:
    if request.path.endswith(".svg"):
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    return render(
        request,
        "frontend/leaderboard.html",
        {"error": str(exc), "categories": LABELS.items(), "kind": _kind(request)},
        status=400,
    )


def _table(snapshot: RatingSnapshot | None, kind: str) -> dict | None:
    if snapshot is None:
        return None
    return snapshot.raw if kind == "raw" or snapshot.style is None else snapshot.style


def _kind(request: HttpRequest) -> str:
    return "raw" if request.GET.get("kind") == "raw" else "style"


@require_GET
def leaderboard_page(request: HttpRequest) -> HttpResponse:
    try:
        board = _Board(request)
    except CategoryUnknown as exc:
        return _unknown_category(request, exc)
    snapshot = board.snapshot
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
            "categories": LABELS.items(),
            "category": board.category,
            "withheld": board.withheld,
        },
    )


@require_GET
def leaderboard_json(request: HttpRequest) -> JsonResponse:
    try:
        board = _Board(request)
    except CategoryUnknown as exc:
        return JsonResponse(
            {"error": str(exc), "code": "unknown_category", "categories": list(CATEGORIES)},
            status=400,
        )
    snapshot = board.snapshot
    if snapshot is None:
        return JsonResponse(
            {
                "category": board.category,
                "n_battles": 0,
                "style": None,
                "raw": None,
                "analyses": {},
                **({"withheld": board.withheld} if board.withheld else {}),
            }
        )
    return JsonResponse(
        {
            "computed_at": snapshot.created_at.isoformat(),
            "source": snapshot.source,
            "category": snapshot.category,
            "n_battles": snapshot.n_battles,
            "style": snapshot.style,
            "raw": snapshot.raw,
            "analyses": snapshot.analyses,
            "exclusions": snapshot.exclusions,
            # how near-duplicate prompts were down-weighted in this fit ({}: none were)
            "dedup": snapshot.dedup,
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
    try:
        board = _Board(request)
    except CategoryUnknown as exc:
        return _unknown_category(request, exc)
    kind = _kind(request)
    table = _table(board.snapshot, kind)
    title = "Style-controlled scores" if kind == "style" else "Raw Bradley–Terry scores"
    svg = interval_plot_svg(table["scores"] if table else [], title=f"{title}, 95% intervals")
    return HttpResponse(svg, content_type="image/svg+xml")


@require_GET
def winrate_heatmap(request: HttpRequest) -> HttpResponse:
    try:
        snapshot = _Board(request).snapshot
    except CategoryUnknown as exc:
        return _unknown_category(request, exc)
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
