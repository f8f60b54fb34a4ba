"""Style features of an answer, as the battle export contract defines them.

Pure functions, no Django. The rules are fixed so that numbers from different runs, or from
another arena's export, mean the same thing, and they are versioned (`STYLE_VERSION`, written
with every stored answer and in every export line) so that numbers counted under other rules
are never mixed in silently.

- tokens: the number of matches of ``\\w+|[^\\w\\s]`` over the whole answer, code blocks
  included — each run of Unicode word characters is one token and so is each other non-space
  character. It needs no vocabulary file, so it works offline and never changes with a
  model's tokenizer. (Only the markdown counts below skip code.) Unchanged since version 1.

The markdown counts read the token stream of the parser that renders the answer to the voter
(`answer_markdown.ANSWER_MARKDOWN`), so they count what the voter sees, by CommonMark's rules:

- headers: ``h1``..``h6`` headings, ATX (``## Title``) and setext (``Title`` underlined with
  ``===`` or ``---``).
- list items: each item of an ordered (``1.``, ``1)``) or unordered (``-``, ``*``, ``+``) list,
  nested lists and lists inside block quotes included. A ``2.`` that cannot start a list (an
  ordered list interrupts a paragraph only from ``1.``) is paragraph text.
- bold spans: ``strong`` emphasis, by its markup: ``**text**`` or ``__text__``, wherever inline
  text is shown (paragraphs, headers, list items, table cells, link text). An image's alt text
  is not counted: the page does not show images.
- nothing inside code is counted: indented code blocks, fences (``````` or ``~~~``, unclosed
  ones to the end of the answer) and inline code (`` `**kwargs**` ``).
- thematic breaks (``***``, ``- - -``, ``___``) are neither list items nor bold.
- as on the page, blocks nested deeper than the parser's ``maxNesting`` (20) are not shown and
  not counted.

Version 1 (line regexes, before the parser) was wrong on inline code, indented code, setext
headers, ``2.`` inside a paragraph and lists inside block quotes.

Cost: one parse, linear in the answer's length whatever the text (a few milliseconds for a
dense 6,000-character Markdown answer; hostile text such as 3,000 ``![`` takes ~0.1 s and
stays linear: `bench/style_features.py`, figures in the README).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from arena.battles.answer_markdown import ANSWER_MARKDOWN

# 1: line regexes. 2: markdown-it's tokens, as the answer is rendered.
STYLE_VERSION = 2
# Stored rows that predate `Answer.style_version` were counted under version 1.
FIRST_STYLE_VERSION = 1

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_LIST_KINDS = {"ordered_list_open": "ordered", "bullet_list_open": "unordered"}
_LIST_CLOSES = {"ordered_list_close", "bullet_list_close"}
_BOLD_MARKUPS = ("**", "__")


@dataclass(frozen=True)
class StyleFeatures:
    tokens: int
    headers: dict[str, int]  # {"h1": n, ..., "h6": n}
    lists: dict[str, int]  # {"ordered": n, "unordered": n}
    bold: dict[str, int]  # {"**": n, "__": n}


def current_style_version() -> int:
    """The version new answers are stored with (a callable, so the model's default follows
    `STYLE_VERSION` without a migration for each change of rules)."""
    return STYLE_VERSION


def count_tokens(text: str) -> int:
    return sum(1 for _ in TOKEN_PATTERN.finditer(text))


def style_features(text: str) -> StyleFeatures:
    headers = {f"h{level}": 0 for level in range(1, 7)}
    lists = {"ordered": 0, "unordered": 0}
    bold = dict.fromkeys(_BOLD_MARKUPS, 0)
    open_lists: list[str] = []  # the kinds of the lists around the current token, innermost last
    for token in ANSWER_MARKDOWN.parse(text):
        if token.type == "heading_open":
            headers[token.tag] += 1
        elif token.type in _LIST_KINDS:
            open_lists.append(_LIST_KINDS[token.type])
        elif token.type in _LIST_CLOSES:
            open_lists.pop()
        elif token.type == "list_item_open":
            lists[open_lists[-1]] += 1
        elif token.type == "inline":
            # Only the inline token's own children: an image's alt text is the image token's
            # children, one level down, and the page drops images. Code spans are leaves.
            for child in token.children or ():
                if child.type == "strong_open" and child.markup in bold:
                    bold[child.markup] += 1
    return StyleFeatures(tokens=count_tokens(text), headers=headers, lists=lists, bold=bold)


def style_sum(features: Iterable[StyleFeatures]) -> StyleFeatures:
    """The features of a side's whole conversation: each count summed over its answers, as
    Chatbot Arena sums `sum_assistant_*_tokens` and its markdown counts over every turn."""
    total = StyleFeatures(tokens=0, headers={}, lists={}, bold={})
    for part in features:
        total = StyleFeatures(
            tokens=total.tokens + part.tokens,
            headers=_added(total.headers, part.headers),
            lists=_added(total.lists, part.lists),
            bold=_added(total.bold, part.bold),
        )
    return total


def _added(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    return {key: left.get(key, 0) + right.get(key, 0) for key in {**left, **right}}
