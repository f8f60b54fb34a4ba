"""Battles for the rating core, from the database or from a battle export file."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import numpy as np

from arena.battles.export import CHOICE_TO_WINNER, BattleRecord, SideStyle, read_battle_export
from arena.battles.models import Answer, Battle
from arena.battles.selectors import votes_in_fit
from arena.rating import Battles


def battles_from_records(records: Iterable[BattleRecord], *, style: bool) -> Battles:
    rows = list(records)
    style_a = style_b = None
    if style:
        style_a = np.array([_totals(r.style_a) for r in rows], dtype=np.float64).reshape(-1, 4)
        style_b = np.array([_totals(r.style_b) for r in rows], dtype=np.float64).reshape(-1, 4)
    return Battles.build(
        [r.model_a for r in rows],
        [r.model_b for r in rows],
        [r.winner for r in rows],
        style_a=style_a,
        style_b=style_b,
    )


def battles_from_file(path: Path, *, style: bool) -> Battles:
    """Raises ExportFormatError naming the line of the first bad record."""
    return battles_from_records(read_battle_export(path, require_style=style), style=style)


def counted_battles(*, phase: str | None = None) -> tuple[Battles | None, datetime | None]:
    """Every vote in the fit (of one phase's battles, if given: see `votes_in_fit`) as a battle,
    and the newest vote's time (None: no votes yet)."""
    votes = (
        votes_in_fit(phase=phase)
        .order_by("created_at", "battle_id")
        .values_list("choice", "created_at", "battle_id", "battle__leaked_sides")
    )
    rows = list(votes)
    if not rows:
        return None, None
    sides: dict[str, dict[str, tuple[str, list[float]]]] = {}
    answers = Answer.objects.filter(battle_id__in=[r[2] for r in rows]).values_list(
        "battle_id",
        "side",
        "contestant__display_name",
        "tokens",
        "header_counts",
        "list_counts",
        "bold_counts",
    )
    for battle_id, side, name, tokens, headers, lists, bold in answers:
        sides.setdefault(battle_id, {})[side] = (
            name,
            [tokens, sum(headers.values()), sum(lists.values()), sum(bold.values())],
        )
    model_a, model_b, winner, style_a, style_b = [], [], [], [], []
    for choice, _, battle_id, leaked_sides in rows:
        a, b = sides[battle_id]["a"], sides[battle_id]["b"]
        model_a.append(a[0])
        model_b.append(b[0])
        forced = Battle(leaked_sides=leaked_sides).forced_winner  # a one-sided leak decides
        winner.append(CHOICE_TO_WINNER[forced or choice])
        style_a.append(a[1])
        style_b.append(b[1])
    battles = Battles.build(
        model_a,
        model_b,
        winner,
        style_a=np.array(style_a, dtype=np.float64),
        style_b=np.array(style_b, dtype=np.float64),
    )
    return battles, rows[-1][1]


def _totals(side: SideStyle | None) -> list[float]:
    assert side is not None  # read with require_style=True
    return [
        side.tokens,
        sum(side.headers.values()),
        sum(side.lists.values()),
        sum(side.bold.values()),
    ]
