"""Style features of an answer, as the battle export contract defines them.

Pure functions, no Django. The rules are fixed so that numbers from different runs, or from
another arena's export, mean the same thing:

- tokens: the number of matches of ``\\w+|[^\\w\\s]`` over the whole answer, code blocks
  included — each run of Unicode word characters is one token and so is each other non-space
  character. It needs no vocabulary file, so it works offline and never changes with a
  model's tokenizer. (Only the markdown counts below skip code.)
- headers: lines starting with 1–6 ``#`` and a space (``h1``..``h6``).
- list items: lines starting (after indentation) with ``1.``/``1)`` (``ordered``) or with
  ``-``, ``*``, ``+`` and a space (``unordered``).
- bold spans: ``**text**`` and ``__text__`` whose text neither starts nor ends with a space.
- thematic breaks (a line of three or more ``*``, ``-`` or ``_``, spaces allowed between
  them: ``***``, ``* * *``, ``- - -``, ``___``) are neither list items nor bold.
- Markdown is counted outside fenced code blocks (```` ``` ```` or ``~~~``) only. A fence may
  be indented any amount (one inside a list item is indented past three spaces). As in
  CommonMark, a block is closed only by a fence of the same character, at least as long, with
  nothing after it but spaces — ```` ```js ```` inside an open block is code, not its end —
  and an unclosed fence runs to the end of the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
_HEADER = re.compile(r"^\s{0,3}(#{1,6})\s+\S")
_ORDERED = re.compile(r"^\s*\d{1,9}[.)]\s+\S")
_UNORDERED = re.compile(r"^\s*[-*+]\s+\S")
_THEMATIC_BREAK = re.compile(r"^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$")
_BOLD_STARS = re.compile(r"\*\*(?=\S)(?:.*?\S)?\*\*")
_BOLD_UNDERSCORES = re.compile(r"(?<!\w)__(?=\S)(?:.*?\S)?__(?!\w)")


@dataclass(frozen=True)
class StyleFeatures:
    tokens: int
    headers: dict[str, int]  # {"h1": n, ..., "h6": n}
    lists: dict[str, int]  # {"ordered": n, "unordered": n}
    bold: dict[str, int]  # {"**": n, "__": n}


def count_tokens(text: str) -> int:
    return sum(1 for _ in TOKEN_PATTERN.finditer(text))


def lines_outside_code(text: str) -> list[str]:
    outside: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            outside.append(line)
        elif match and _closes(fence, match.group(1), match.group(2)):
            fence = None
    return outside


def _closes(opening: str, candidate: str, rest: str) -> bool:
    return candidate[0] == opening[0] and len(candidate) >= len(opening) and not rest.strip()


def style_features(text: str) -> StyleFeatures:
    headers = {f"h{level}": 0 for level in range(1, 7)}
    lists = {"ordered": 0, "unordered": 0}
    bold = {"**": 0, "__": 0}
    for line in lines_outside_code(text):
        if _THEMATIC_BREAK.match(line):
            continue
        header = _HEADER.match(line)
        if header:
            headers[f"h{len(header.group(1))}"] += 1
        if _ORDERED.match(line):
            lists["ordered"] += 1
        elif _UNORDERED.match(line):
            lists["unordered"] += 1
        bold["**"] += len(_BOLD_STARS.findall(line))
        bold["__"] += len(_BOLD_UNDERSCORES.findall(line))
    return StyleFeatures(tokens=count_tokens(text), headers=headers, lists=lists, bold=bold)
