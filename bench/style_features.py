"""Style features benchmark: what one answer's counts cost, typical and hostile.

`style_features` parses the answer with the page's Markdown parser. Answers are model text
(hostile), and the migration that recounts stored answers, like any recount, runs it once per
answer, so its cost must stay linear in the answer's length whatever the text is.

Prints, for a typical Markdown answer of 6,000 characters (the arena's default answer cap)
and for hostile texts built to stress the parser (runs of `*`, `[`, `![`, backticks, nested
quotes, a long table...), the best time over `--repeat` runs at 6,000 and 48,000 characters
and their ratio: about 8 when the work is linear, 64 when quadratic. Then the projected time
to recount a million answers like the typical one.

Run: `.venv/bin/python bench/style_features.py [--repeat N]`. No target is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arena.battles.style import style_features  # noqa: E402

CAP = 6_000
LARGE = 48_000


def typical_answer(length: int) -> str:
    """A model's Markdown answer: headers, prose with bold and inline code, lists, a fenced
    block and a table, repeated to `length` characters."""
    section = (
        "## Step {n}: set up the environment\n\n"
        "First, **install** the package with `pip install arena` and check the version. "
        "The __default__ settings work for most users; change them only if you need to.\n\n"
        "1. Create a virtual environment.\n"
        "2. Install the dependencies:\n"
        "   - `numpy` for the arrays;\n"
        "   - `scipy` for the optimiser.\n"
        "3. Run the tests.\n\n"
        "```python\n# not a header\nfor i in range(10):\n    print(i ** 2)\n```\n\n"
        "| option | default | meaning |\n|---|---|---|\n| `--seed` | 0 | **random** seed |\n\n"
        "> Note: a *quoted* remark with a [link](https://example.com).\n\n"
    )
    text, n = "", 1
    while len(text) < length:
        text += section.format(n=n)
        n += 1
    return text[:length]


HOSTILE: dict[str, Callable[[int], str]] = {
    "6,000 '*' (one line)": lambda n: "*" * n,
    "'*a' repeated": lambda n: "*a" * (n // 2),
    "'**a ' openers": lambda n: "**a " * (n // 4),
    "'_a' repeated": lambda n: "_a" * (n // 2),
    "'[' repeated": lambda n: "[" * n,
    "'![' repeated": lambda n: "![" * (n // 2),
    "'`a``' runs": lambda n: "`a``" * (n // 4),
    "'> ' nested quotes": lambda n: "> " * (n // 2) + "- x",
    "nested list items": lambda n: "".join("  " * (i % 40) + "- x\n" for i in range(n // 40)),
    "'- ' on one line": lambda n: "- " * (n // 2) + "x",
    "'<' repeated": lambda n: "<" * n,
    "table rows": lambda n: "|a|b|\n|-|-|\n" + "|x|\n" * (n // 4),
    "newlines": lambda n: "\n" * n,
}


def best_seconds(text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        style_features(text)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    cases = {"typical Markdown answer": typical_answer, **HOSTILE}
    print(f"{'text':28} {'6,000 chars':>12} {'48,000 chars':>13} {'ratio':>6}  (8 = linear)")
    for name, make in cases.items():
        small = best_seconds(make(CAP), args.repeat)
        large = best_seconds(make(LARGE), args.repeat)
        print(f"{name:28} {small * 1e3:9.2f} ms {large * 1e3:10.2f} ms {large / small:6.1f}")
    per_answer = best_seconds(typical_answer(CAP), args.repeat)
    print(
        f"recounting 1,000,000 typical {CAP:,}-char answers: ~{per_answer * 1e6 / 60:.0f} min "
        f"on one core ({per_answer * 1e3:.2f} ms each)"
    )


if __name__ == "__main__":
    main()
