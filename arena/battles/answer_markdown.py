"""The one Markdown parser for model answers. Pure, no Django.

Three readers must agree on what an answer's Markdown is: the page that shows it to the voter
(`frontend/markdown.py` renders with it, then sanitises), the identity check (reads the
rendered text, `identity.py`), and the style features the rating controls for (counts its
tokens, `style.py`). Each of them uses this parser, never a second one with other rules,
so a header the voter sees is a header the fit counts, and a `**` in inline code is neither.
"""

from __future__ import annotations

from markdown_it import MarkdownIt


def answer_markdown_parser() -> MarkdownIt:
    # Raw HTML off: an answer's `<b>` or `<script>` shows as text. `breaks`: a model's single
    # newline is a line break, as chat interfaces show it. Tables and ~~strikethrough~~ on
    # because models write them. CommonMark's `maxNesting` (20) caps how deep blocks nest.
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
        ["table", "strikethrough"]
    )


# Shared by every reader. Parsing keeps its state per call, so one instance serves all threads.
ANSWER_MARKDOWN = answer_markdown_parser()
