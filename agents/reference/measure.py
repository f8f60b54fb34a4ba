"""Token counts for a data record, as the model will see them (its chat template applied):

    python -m agents.reference.measure --model DIR --data FILE.jsonl
    -> {"rows": 400, "tokens": 9876}

Rows are chats (`messages`) or preference pairs (`prompt`, `chosen`, `rejected`; the prompt
is counted once per answer, as DPO reads it). Run by the training interpreter.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def count_tokens(tokenizer: Any, row: dict[str, Any]) -> int:
    def length(messages: list[dict[str, str]]) -> int:
        ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)
        return len(ids["input_ids"])

    if "messages" in row:
        return length(row["messages"])
    return length(row["prompt"] + row["chosen"]) + length(row["prompt"] + row["rejected"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line]
    print(json.dumps({"rows": len(rows), "tokens": sum(count_tokens(tokenizer, r) for r in rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
