"""Model output as safe HTML for the voter's page: the arena core's one renderer
(`arena.battles.answer_markdown.markdown_html`), so the identity check and the style features,
which read answers through the same parser, see what the voter sees."""

from __future__ import annotations

from arena.battles.answer_markdown import markdown_html as render_markdown

__all__ = ["render_markdown"]
