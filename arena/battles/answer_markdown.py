"""The one Markdown parser for model answers, and the one safe HTML made from it. Pure, no Django.

Three readers must agree on what an answer's Markdown is: the page that shows it to the voter
(`frontend/markdown.py` renders with `markdown_html`), the identity check (reads the
rendered text, `identity.py`), and the style features the rating controls for (counts its
tokens, `style.py`). Each of them uses this parser, never a second one with other rules,
so a header the voter sees is a header the fit counts, and a `**` in inline code is neither.
An answer never becomes a link: the page shows a link's text and its address as plain text
(`[docs](https://x)` reads "docs (https://x)"), so a tap on an answer cannot take the voter, or
a kiosk, to a page the model chose. The organizers' daily reports (`arena.phases.reports`) are
Markdown the platform writes, agent text in them escaped; `document_html` renders them with the
same parser and keeps their links (to the report's own pages).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token


def _markdown_parser() -> MarkdownIt:
    # Raw HTML off: an answer's `<b>`, `<a>` or `<script>` shows as text. `breaks`: a model's
    # single newline is a line break, as chat interfaces show it. Tables and ~~strikethrough~~
    # on because models write them. CommonMark's `maxNesting` (20) caps how deep blocks nest.
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
        ["table", "strikethrough"]
    )


def answer_markdown_parser() -> MarkdownIt:
    """The parser, rendering every link (inline, reference, autolink) as its text followed by
    its address in parentheses, all plain text; the address alone when it is the text."""
    parser = _markdown_parser()
    parser.add_render_rule("link_open", _link_open_as_text)
    parser.add_render_rule("link_close", _link_close_as_text)
    return parser


def _link_open_as_text(
    renderer: object, tokens: Sequence[Token], idx: int, options: object, env: object
) -> str:
    return ""


def _link_close_as_text(
    renderer: object, tokens: Sequence[Token], idx: int, options: object, env: object
) -> str:
    # CommonMark links do not nest: the nearest link_open before this close is its own.
    start = next(i for i in range(idx - 1, -1, -1) if tokens[i].type == "link_open")
    address = str(tokens[start].attrs.get("href", ""))
    shown = "".join(token.content for token in tokens[start + 1 : idx])
    if not address or address in {shown, f"mailto:{shown}"}:
        return ""
    return f" ({html.escape(address)})"


# Shared by every reader. Parsing keeps its state per call, so one instance serves all threads.
ANSWER_MARKDOWN = answer_markdown_parser()
_DOCUMENT_MARKDOWN = _markdown_parser()

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
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}  # fmt: skip  -- no <img>: a remote image would leak the reader's address to its host
_ALLOWED_ATTRIBUTES = {"ol": {"start"}, "code": {"class"}}


def markdown_html(text: str) -> str:
    """An answer's Markdown as safe HTML: rendered with raw HTML disabled and links as text,
    then cleaned by an allow-list without `<a>`, so a `<script>`, an event handler or a link
    in the text is inert."""
    return nh3.clean(
        ANSWER_MARKDOWN.render(text), tags=_ALLOWED_TAGS, attributes=_ALLOWED_ATTRIBUTES
    )


def document_html(markdown: str) -> str:
    """Markdown the platform wrote (agent text in it escaped) as safe HTML, its links kept:
    the same parser and allow-list as answers, plus `<a>` to http(s) and mailto."""
    return nh3.clean(
        _DOCUMENT_MARKDOWN.render(markdown),
        tags=_ALLOWED_TAGS | {"a"},
        attributes={**_ALLOWED_ATTRIBUTES, "a": {"href", "title"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
