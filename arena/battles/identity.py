"""Does an answer reveal who wrote it? Pure functions, no Django.

Two kinds of words, two rules. Both match case-insensitively, let spaces, hyphens and
underscores stand for one another ("RSI Arena", "rsi-arena", "rsi_arena", "rsiarena"), need a
boundary *before* the word, and ignore words shorter than 3 characters (they match ordinary
prose too often to mean anything).

- A contestant's **name** (display name, served model name, checkpoint path) must stand alone:
  a boundary after it too. Names are whatever an operator or an agent typed, often ordinary
  words ("reference-base", "Narcissus", even "base"); letting them run on would make "base"
  void every answer that says "baseline" or "based". The boundary before keeps "database"
  clear. A contestant named with an ordinary word still voids answers that use that word on
  its own, so contestants should get distinctive names.
- A **configured** word (``ARENA_IDENTITY_WORDS``, a contestant's ``identity_words``) may run
  on into letters and digits: vendors and families name their models by suffixing, so
  "GPT-4" must catch "GPT-4o" and "Llama" "Llama3". These words are chosen because they are
  revealing, so the rare false hit ("Claude" in "Claudette") is the cheaper mistake.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MIN_WORD_CHARS = 3


def revealed_identity(
    text: str, *, names: Iterable[str] = (), configured: Iterable[str] = ()
) -> str | None:
    """The first name or configured word found in `text`, or None."""
    candidates = [(word, False) for word in names] + [(word, True) for word in configured]
    for word, may_run_on in candidates:
        if len(word.strip()) < MIN_WORD_CHARS:
            continue
        if _word_pattern(word, may_run_on).search(text):
            return word
    return None


@functools.lru_cache(maxsize=4096)
def _word_pattern(word: str, may_run_on: bool) -> re.Pattern[str]:
    # Cached: every battle checks every contestant's names, and they rarely change.
    parts = [re.escape(part) for part in re.split(r"[\s_-]+", word.strip()) if part]
    body = r"[\s_-]*".join(parts)
    end = "" if may_run_on else r"(?!\w)"
    return re.compile(rf"(?<!\w){body}{end}", re.IGNORECASE)
