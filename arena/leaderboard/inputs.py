"""Battles for the rating core, from the database or from a battle export file."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import numpy as np
from django.db import connection
from django.db.models import (
    Case,
    FilteredRelation,
    FloatField,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import Combinable
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from numpy.typing import NDArray

from arena.battles.export import (
    BOLD_KEYS,
    CHOICE_TO_WINNER,
    HEADER_KEYS,
    LIST_KEYS,
    WINNERS,
    BattleRecord,
    SideStyle,
)
from arena.battles.models import Answer, Battle
from arena.battles.selectors import votes_in_fit
from arena.leaderboard.export_reader import battle_columns_from_file
from arena.rating import Battles
from arena.rating.data import OUTCOME
from arena.serving.models import Contestant


def battles_from_records(records: Iterable[BattleRecord], *, style: bool) -> Battles:
    """The record-by-record path: every line as a `BattleRecord` first. Kept as the reference
    the columnar readers are tested and benchmarked against."""
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
    """Raises ExportFormatError naming the line of the first bad record. Streams the file into
    columns (see export_reader.py); `battles_from_records` is the record-by-record reference."""
    return battle_columns_from_file(path, style=style).battles()


def battles_grouped_from_file(
    path: Path, *, style: bool, category: str | None = None
) -> tuple[Battles | None, NDArray[np.int64]]:
    """The file's battles (those tagged `category`, if given; None when there are none) and
    each one's prompt group, as `battles_from_file` reads them."""
    columns = battle_columns_from_file(path, style=style, category=category)
    if len(columns.winner) == 0:
        return None, columns.groups
    return columns.battles(), columns.groups


# Rows fetched per round trip of the server-side cursor: big enough that the round trips do
# not count, small enough that a chunk of Python tuples stays a few MB.
FETCH_ROWS = 20_000
# The winner a counted vote stands for, as an index into WINNERS: a one-sided leak decides
# it (the side that leaked loses, `Battle.forced_winner`), else the voter's choice does.
_WINNER_INDEX = {winner: i for i, winner in enumerate(WINNERS)}
_OUTCOME_OF_INDEX = np.array([OUTCOME[winner] for winner in WINNERS])


def votes_in_category(*, phase: str | None = None, category: str | None = None) -> QuerySet:
    """The votes in the fit (`votes_in_fit`), of battles tagged `category` if given."""
    votes = votes_in_fit(phase=phase)
    if category:
        votes = votes.filter(battle__categories__contains=f",{category},")
    return votes


def counted_battles(
    *, phase: str | None = None, category: str | None = None
) -> tuple[Battles | None, datetime | None]:
    """`counted_battles_grouped` without the prompt groups."""
    battles, _, last_vote_at = counted_battles_grouped(phase=phase, category=category)
    return battles, last_vote_at


def counted_battles_grouped(
    *, phase: str | None = None, category: str | None = None
) -> tuple[Battles | None, NDArray[np.int64] | None, datetime | None]:
    """Every vote in the fit (of one phase's battles, if given: see `votes_in_fit`; of the
    battles tagged `category`, if given) as a battle, each battle's prompt group
    (`groups_of_table`), and the newest vote's time (None: no votes yet).

    One query reads only numbers — both sides' contestant ids, the winner's index, the style
    totals summed by the database from the stored counts, the prompt group — through one
    binary COPY (PostgreSQL) or a server-side cursor into numpy arrays: no model instances, no
    per-vote Python objects kept, no list of battle ids sent back."""
    votes = votes_in_category(phase=phase, category=category)
    last_vote_at = votes.aggregate(last=Max("created_at"))["last"]
    if last_vote_at is None:
        return None, None, None
    # Votes committed after `last_vote_at` was read wait for the next fit, so the time this
    # returns is that of the newest vote fitted.
    table = counted_table(votes.filter(created_at__lte=last_vote_at))
    if len(table) == 0:
        return None, None, None
    return battles_of_table(table), groups_of_table(table), last_vote_at


# The columns of `counted_table`, in order: both contestant ids, the winner's index into
# WINNERS, then side A's four style totals (tokens, headers, list items, bold), B's, and the
# battle's prompt group.
TABLE_WIDTH = 12


def counted_rows(votes: QuerySet, *leading: str) -> QuerySet:
    """`votes` with both answers joined, as rows of the `TABLE_WIDTH` float columns after the
    `leading` fields of the vote, oldest first; a vote whose battle lacks an answer is left
    out."""
    columns = {
        "id_a": Cast("side_a__contestant_id", FloatField()),
        "id_b": Cast("side_b__contestant_id", FloatField()),
        "winner_index": Cast(_winner_index(), FloatField()),
        "tokens_a": Cast("side_a__tokens", FloatField()),
        **_style_totals("a"),
        "tokens_b": Cast("side_b__tokens", FloatField()),
        **_style_totals("b"),
        # 52-bit keys: exact in a float8 (-1: a battle stored before prompt keys existed).
        "prompt_group": Cast(
            Coalesce("battle__prompt_group", "battle__prompt_key", Value(-1)), FloatField()
        ),
    }
    return (
        votes.annotate(
            side_a=FilteredRelation("battle__answers", condition=Q(battle__answers__side="a")),
            side_b=FilteredRelation("battle__answers", condition=Q(battle__answers__side="b")),
        )
        .filter(side_a__isnull=False, side_b__isnull=False)
        .order_by("created_at", "battle_id")
        .annotate(**columns)
        .values_list(*leading, *columns)
    )


def counted_table(votes: QuerySet) -> NDArray[np.float64]:
    """`counted_rows(votes)` as an (n, TABLE_WIDTH) array: ids and indexes are exact in a
    float64, and the style totals are floats already (a count may be stored as 3.0)."""
    rows = counted_rows(votes)
    if connection.vendor == "postgresql":
        return _table_by_copy(rows, TABLE_WIDTH)
    return _table_by_rows(rows, TABLE_WIDTH)


def battles_of_table(
    table: NDArray[np.float64], contestant_ids: NDArray[np.int64] | None = None
) -> Battles:
    """The battles of `counted_table` rows, the contestants rated under their display names,
    as the export names them. `contestant_ids`: the distinct ids in the table's first two
    columns, when the caller knows them (the live inputs keep them as votes arrive)."""
    pairs = table[:, :2].astype(np.int64)
    if contestant_ids is None:
        contestant_ids = np.unique(pairs)
    names_of = dict(
        Contestant.objects.filter(pk__in=contestant_ids.tolist()).values_list("pk", "display_name")
    )
    names = sorted({names_of[i] for i in contestant_ids.tolist()})
    name_code = {name: i for i, name in enumerate(names)}
    # A gather through a table indexed by id: one pass, no sort of the million pairs.
    code_of_id = np.full(int(contestant_ids.max()) + 1, -1, dtype=np.intp)
    code_of_id[contestant_ids] = [name_code[names_of[i]] for i in contestant_ids.tolist()]
    codes = code_of_id[pairs]
    return Battles.from_codes(
        names,
        codes[:, 0],
        codes[:, 1],
        _OUTCOME_OF_INDEX[table[:, 2].astype(np.intp)],
        style_a=table[:, 3:7],
        style_b=table[:, 7:11],
    )


def groups_of_table(table: NDArray[np.float64]) -> NDArray[np.int64]:
    """Each row's prompt group (its near-duplicate group's key, else its normalised prompt's
    key: `arena/battles/prompt_groups.py`); a battle stored before prompt keys existed is a
    group of its own."""
    groups = table[:, 11].astype(np.int64)
    unkeyed = groups < 0
    groups[unkeyed] = -1 - np.flatnonzero(unkeyed)
    return groups


def _table_by_rows(rows: QuerySet, width: int) -> NDArray[np.float64]:
    """The rows as an (n, columns) float array, fetched in chunks through a server-side cursor
    where the database has them (any database Django runs on)."""
    chunks = [np.empty((0, width))]
    chunk: list[tuple[float, ...]] = []
    for row in rows.iterator(chunk_size=FETCH_ROWS):
        chunk.append(row)
        if len(chunk) == FETCH_ROWS:
            chunks.append(np.array(chunk, dtype=np.float64))
            chunk = []
    if chunk:
        chunks.append(np.array(chunk, dtype=np.float64))
    return np.concatenate(chunks)


def _table_by_copy(rows: QuerySet, width: int) -> NDArray[np.float64]:
    """The same array from PostgreSQL's binary COPY of the query: every column is a non-null
    float8, so each row is the same 2 + 12·k bytes and numpy reads them all in one view, with
    no Python object per row or per value."""
    sql, params = rows.query.sql_with_params()
    row_type = np.dtype(
        [("fields", ">i2")]
        + [(f, t) for i in range(width) for f, t in ((f"n{i}", ">i4"), (f"v{i}", ">f8"))]
    )
    buffer = bytearray()
    statement = f"COPY ({sql}) TO STDOUT (FORMAT BINARY)"
    with connection.cursor() as cursor, cursor.cursor.copy(statement, params) as copy:
        for block in copy:
            buffer += block
    # 11-byte signature, 4 bytes of flags, a 4-byte header extension length (0), the rows,
    # and a 2-byte trailer (-1).
    body = memoryview(buffer)[19:-2]
    table = np.frombuffer(body, dtype=row_type)
    if len(table) and (
        np.any(table["fields"] != width) or any(np.any(table[f"n{i}"] != 8) for i in range(width))
    ):
        raise RuntimeError("COPY returned a NULL or a column that is not float8")
    return np.stack([table[f"v{i}"] for i in range(width)], axis=1).astype(np.float64)


def _winner_index() -> Case:
    forced = [
        When(battle__leaked_sides="a", then=Value(_WINNER_INDEX["model_b"])),
        When(battle__leaked_sides="b", then=Value(_WINNER_INDEX["model_a"])),
    ]
    chosen = [
        When(choice=choice, then=Value(_WINNER_INDEX[winner]))
        for choice, winner in CHOICE_TO_WINNER.items()
    ]
    return Case(*forced, *chosen, default=Value(-1), output_field=IntegerField())


def _style_totals(side: str) -> dict[str, Combinable]:
    """The header, list and bold totals of one side's answer, summed by the database over the
    keys the export carries (the JSON counts are never read into Python)."""
    relation = f"side_{side}"

    def total(field: str, keys: tuple[str, ...]) -> Combinable:
        terms = [
            Coalesce(Cast(KeyTextTransform(key, f"{relation}__{field}"), FloatField()), Value(0.0))
            for key in keys
        ]
        return sum(terms[1:], start=terms[0])

    return {
        f"headers_{side}": total("header_counts", HEADER_KEYS),
        f"lists_{side}": total("list_counts", LIST_KEYS),
        f"bold_{side}": total("bold_counts", BOLD_KEYS),
    }


def _totals(side: SideStyle | None) -> list[float]:
    assert side is not None  # read with require_style=True
    return [
        side.tokens,
        sum(side.headers.values()),
        sum(side.lists.values()),
        sum(side.bold.values()),
    ]


def counted_battles_row_by_row(
    *, phase: str | None = None
) -> tuple[Battles | None, datetime | None]:
    """What `counted_battles` did before it read columns: every vote and answer row into
    Python. Kept as the reference it is tested and benchmarked against."""
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
