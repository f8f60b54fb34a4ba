"""A phase's battles as a hub data set repository: the battle export (JSONL, exactly as
`battles export` writes it) and the same rows as Parquet, with a dataset card naming every
column.

The Parquet schema is written down here rather than inferred from the rows: the style counts
are fixed-key objects in the export contract (arena/battles/style.py), and inference would
turn a count missing from one row into a different type or an empty struct Parquet cannot
hold. A row with a column the schema does not know stops the release, naming the column, so
the two files never disagree silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData

from arena.battles.categories import CATEGORIES, HARD_CRITERIA
from arena.battles.export import BOLD_KEYS, HEADER_KEYS, LIST_KEYS, write_battle_export

JSONL_NAME = "battles.jsonl"
PARQUET_PATH = Path("data") / "train-00000-of-00001.parquet"


def _counts(keys: tuple[str, ...]) -> pa.DataType:
    return pa.struct([(key, pa.int64()) for key in keys])


_TURN = pa.struct([("role", pa.string()), ("content", pa.string())])
# name, type, what it holds (the dataset card's column table)
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("battle_id", pa.string(), "the battle's id in the arena"),
    ("model_a", pa.string(), "the model on side A (a nominee is `AGENT-PHASE`)"),
    ("model_b", pa.string(), "the model on side B"),
    ("winner", pa.string(), "model_a, model_b, tie or tie (bothbad)"),
    ("tstamp", pa.float64(), "when the vote was cast (Unix seconds)"),
    ("judge", pa.string(), "the voter, as a salted hash"),
    ("phase", pa.string(), "the phase label"),
    ("targeted_round", pa.int64(), "the targeted round the battle belongs to (null: random pair)"),
    ("language", pa.string(), "the prompt's language, when known"),
    ("turn", pa.int64(), "the voter's prompts in the battle: 1, or more with follow-ups"),
    (
        "category_tag",
        pa.struct(
            [(name, pa.bool_()) for name in CATEGORIES]
            + [
                ("hard_criteria", pa.struct([(name, pa.bool_()) for name in HARD_CRITERIA])),
                ("categorized_by", pa.string()),
            ]
        ),
        "the prompt's categories, one boolean each (Chatbot Arena's field); Arena-Hard's "
        "criteria when a judge read it, and who tagged it (rules, judge:<model>)",
    ),
    (
        "prompt_group",
        pa.int64(),
        "the prompt's near-duplicate group: battles sharing it are down-weighted in the fit",
    ),
    (
        "conv_metadata",
        pa.struct(
            [
                ("sum_user_tokens", pa.int64()),
                ("sum_assistant_a_tokens", pa.int64()),
                ("sum_assistant_b_tokens", pa.int64()),
                ("header_count_a", _counts(HEADER_KEYS)),
                ("header_count_b", _counts(HEADER_KEYS)),
                ("list_count_a", _counts(LIST_KEYS)),
                ("list_count_b", _counts(LIST_KEYS)),
                ("bold_count_a", _counts(BOLD_KEYS)),
                ("bold_count_b", _counts(BOLD_KEYS)),
                ("leaked_side", pa.string()),
                ("vote", pa.string()),
                ("style_version", pa.int64()),
            ]
        ),  # fmt: skip
        "style counts of each answer (tokens, markdown headers, lists, bold) for style "
        "control; `leaked_side` is the side whose answer revealed its identity and lost for "
        "it, `vote` the voter's own choice, `style_version` the rules the counts follow",
    ),
    (
        "conversation_a",
        pa.list_(_TURN),
        "every prompt and side A's answer to it, as chat turns (user, assistant, …)",
    ),
    ("conversation_b", pa.list_(_TURN), "every prompt and side B's answer to it"),
    ("finish_reason_a", pa.string(), "why side A's generation stopped"),
    ("finish_reason_b", pa.string(), "why side B's generation stopped"),
)
SCHEMA = pa.schema([(name, kind) for name, kind, _ in COLUMNS])


class UnknownColumn(ValueError):
    pass


def battles_write(*, rows: Iterable[dict[str, Any]], folder: Path) -> tuple[int, list[str]]:
    """Write the rows as `battles.jsonl` and as Parquet under `data/`; the row count and the
    models that fought."""
    folder.mkdir(parents=True, exist_ok=True)
    count = write_battle_export(rows, folder / JSONL_NAME)
    parquet = folder / PARQUET_PATH
    parquet.parent.mkdir(parents=True, exist_ok=True)
    writer = pq.ParquetWriter(parquet, SCHEMA)
    try:
        batch: list[dict[str, Any]] = []
        models: set[str] = set()
        for row in _read_back(folder / JSONL_NAME):
            batch.append(row)
            models.update((row["model_a"], row["model_b"]))
            if len(batch) == 5000:
                writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
                batch = []
        writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
    finally:
        writer.close()
    return count, sorted(models)


def _read_back(path: Path) -> Iterable[dict[str, Any]]:
    """The export's rows as written (so both files hold the same JSON values), each checked
    against the schema's columns."""
    known = set(SCHEMA.names)
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            extra = sorted(set(row) - known)
            if extra:
                raise UnknownColumn(
                    f"the battle export has columns the release's Parquet schema lacks: "
                    f"{', '.join(extra)} (add them to arena/phases/release_battles.py)"
                )
            yield row


def battles_card(
    *, phase_label: str, competition: str, rows: int, models: list[str]
) -> DatasetCard:
    data = DatasetCardData(
        pretty_name=f"{competition} {phase_label} battles",
        task_categories=["text-generation"],
        size_categories=[_size_category(rows)],
        tags=["arena", "human-preferences", "rsi-arena"],
        configs=[{"config_name": "default", "data_files": [{"split": "train",
                                                           "path": str(PARQUET_PATH)}]}],
    )  # fmt: skip
    columns = "\n".join(f"| `{name}` | {kind} | {text} |" for name, kind, text in COLUMNS)
    body = f"""
# {competition}: {phase_label} battles

Every counted vote of the phase {phase_label} of {competition} ({rows} battles), one row a
battle, between these models: {", ".join(f"`{m}`" for m in models) or "none"}. Nominees are
named `AGENT-{phase_label}` and released as model repositories under the same names.

`{JSONL_NAME}` is the arena's battle export, compatible with the public Chatbot Arena "clean
battle" format; `{PARQUET_PATH}` holds the same rows. Votes that were not counted (excluded
voters, void battles) are left out. Voters appear only as salted hashes.

## Columns

| column | type | meaning |
| --- | --- | --- |
{columns}
"""
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n{body}")


def _size_category(rows: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if rows < bound:
            return name
    return "100K<n<1M" if rows < 1_000_000 else "n>1M"
