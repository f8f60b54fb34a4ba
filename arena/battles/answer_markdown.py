"""The one Markdown parser for model answers, and the one safe HTML made from it. Pure, no Django.

Three readers must agree on what an answer's Markdown is: the page that shows it to the voter
(`frontend/markdown.py` renders with `markdown_html`), the identity check (reads the
rendered text, `identity.py`), and the style features the rating controls for (counts its
tokens, `style.py`). Each of them uses this parser, never a second one with other rules,
so a header the voter sees is a header the fit counts, and a `**` in inline code is neither.
The organizers' daily reports (`arena.phases.reports`) are written in Markdown and made HTML
by `markdown_html` too: agent text lands in them.
"""

from __future__ import annotations

import nh3
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

_ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "strong",
    "em",
    "del",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}  # fmt: skip  -- no <img>: a remote image would leak the reader's address to its host
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}}


def markdown_html(text: str) -> str:
    """Markdown as safe HTML: rendered with raw HTML disabled, then cleaned by an allow-list,
    so a `<script>`, an event handler or a `javascript:` link in the text is inert."""
    return nh3.clean(
        ANSWER_MARKDOWN.render(text),
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
