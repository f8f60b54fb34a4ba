"""Model output as safe HTML: Markdown rendered with raw HTML disabled, then cleaned by an
allow-list, so a `<script>`, an event handler or a `javascript:` link in an answer is inert."""

from __future__ import annotations

import nh3

# The one answer parser: the identity check and the style features read answers through it
# too, so they see what the voter sees.
from arena.battles.answer_markdown import ANSWER_MARKDOWN as _renderer

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
}  # fmt: skip  -- no <img>: a remote image would leak the voter's address to its host
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "code": {"class"}}


def render_markdown(text: str) -> str:
    return nh3.clean(
        _renderer.render(text),
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
