"""Does an answer reveal who wrote it? Pure functions, no Django."""

from __future__ import annotations

import re


def _word_pattern(word: str) -> re.Pattern[str]:
    # Match the word as a whole, case-insensitively, letting spaces, hyphens and underscores
    # stand for one another ("RSI Arena", "rsi-arena", "rsi_arena").
    parts = [re.escape(part) for part in re.split(r"[\s_-]+", word.strip()) if part]
    body = r"[\s_-]*".join(parts)
    return re.compile(rf"(?<![\w]){body}(?![\w])", re.IGNORECASE)


def revealed_identity(text: str, words: list[str]) -> str | None:
    """The first identity word found in `text`, or None. Words shorter than 3 characters are
    ignored: they match ordinary prose too often to mean anything."""
    for word in words:
        if len(word.strip()) < 3:
            continue
        if _word_pattern(word).search(text):
            return word
    return None
