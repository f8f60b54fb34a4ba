"""Does an answer reveal who wrote it? Pure functions, no Django.

**What is read.** The voter sees an answer twice: as raw text while it streams, then rendered
as Markdown. Both views are checked, each after the same normalisation (`normalise`), so a
name is found however it is dressed up, as long as a person would still read it:

1. the rendered view is the text of the HTML that `ANSWER_MARKDOWN` (the page's own
   renderer) makes of the answer, block elements kept apart ("Cl**au**de" reads "Claude",
   two paragraphs "Clau" and "de" do not);
2. HTML entities are decoded (``Cl&#97;ude``), in both views;
3. NFKD: fullwidth and styled letters become plain ones (``ｃｌａｕｄｅ``, ``𝐂𝐥𝐚𝐮𝐝𝐞``), and
   accents come apart from their letters;
4. invisible format characters (Unicode category Cf: zero-width space and joiners, word
   joiner, BOM, soft hyphen, bidi controls, ...) and combining marks (accents) are dropped;
5. case is folded, then every letter or digit that Unicode's confusables table
   (``confusable-homoglyphs``, generated from UTS #39 ``confusables.txt``) lists as a look-alike
   is replaced by its prototype (Cyrillic "С" reads "c", Greek "ο" reads "o", "0" reads "o"),
   and case is folded again. A symbol is never folded into a letter, nor a letter into a
   symbol: "|" looks like "l", but "|Claude|" must still have boundaries around "Claude".

The words searched for go through the same normalisation, so both sides meet in one form.

**How words match.** Two kinds of words, two rules. Both let spaces, hyphens and underscores
stand for one another ("RSI Arena", "rsi-arena", "rsi_arena", "rsiarena"), need a boundary
*before* the word, and ignore words shorter than 3 characters (they match ordinary prose too
often to mean anything).

- A contestant's **name** (display name, served model name, checkpoint path, its agent's
  name) must stand alone: a boundary after it too. Names are whatever an operator or an agent
  typed, often ordinary words ("reference-base", "Narcissus", even "base"); letting them run
  on would make "base" void every answer that says "baseline" or "based". The boundary before
  keeps "database" clear. A contestant named with an ordinary word still voids answers that
  use that word on its own, so contestants should get distinctive names.
- A **configured** word (``ARENA_IDENTITY_WORDS``, a contestant's ``identity_words``) may run
  on into letters and digits: vendors and families name their models by suffixing, so
  "GPT-4" must catch "GPT-4o" and "Llama" "Llama3". These words are chosen because they are
  revealing, so the rare false hit ("Claude" in "Claudette") is the cheaper mistake.
"""

from __future__ import annotations

import functools
import html
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser

from confusable_homoglyphs.utils import load as load_confusables

# The page's Markdown parser (frontend/markdown.py renders with it and sanitises the output):
# one definition, so the check reads answers exactly as they are shown.
from arena.battles.answer_markdown import ANSWER_MARKDOWN

MIN_WORD_CHARS = 3


def revealed_identity(
    text: str, *, names: Iterable[str] = (), configured: Iterable[str] = ()
) -> str | None:
    """The first name or configured word found in `text` as the voter reads it, or None."""
    views = {normalise(text), normalise(rendered_text(text))}
    return next(_found(views, names, configured), None)


def words_written(
    text: str, *, names: Iterable[str] = (), configured: Iterable[str] = ()
) -> set[str]:
    """The names and configured words that `text` (what a voter typed) holds by the rules an
    answer is read with: a name the voter wrote inside a longer word ("Nova" in "supernova")
    was not written, so an answer that says it still gives it away."""
    return set(_found({normalise(text)}, names, configured))


def _found(views: set[str], names: Iterable[str], configured: Iterable[str]) -> Iterator[str]:
    candidates = [(word, False) for word in names] + [(word, True) for word in configured]
    for word, may_run_on in candidates:
        if len(word.strip()) < MIN_WORD_CHARS:
            continue
        matcher = _word_matcher(word, may_run_on)
        if matcher is None:
            continue
        needle, pattern = matcher
        # The plain substring test first: most words are absent, and `in` is far faster
        # than a search whose lookbehind defeats the regex engine's own literal scan.
        if any(needle in view and pattern.search(view) for view in views):
            yield word


def normalise(text: str) -> str:
    """`text` in the one form that matching compares: entities decoded, compatibility forms
    and look-alike letters folded to their prototypes, invisible characters dropped, no case."""
    text = unicodedata.normalize("NFKD", html.unescape(text))
    text = text.translate(_invisible()).casefold()
    return text.translate(_skeletons()).casefold()


def rendered_text(markdown: str) -> str:
    """The text the page shows for an answer: its rendered Markdown without the tags."""
    reader = _VisibleText()
    reader.feed(ANSWER_MARKDOWN.render(markdown))
    reader.close()
    return "".join(reader.parts)


class _VisibleText(HTMLParser):
    # Blocks and line breaks separate words on the page; inline tags (emphasis, code, links)
    # do not. Attributes (a link's address, an image's alt text) are not shown, so not read.
    _BREAKS = frozenset(
        {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "ul", "ol",
         "li", "table", "thead", "tbody", "tr", "th", "td"}
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._BREAKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


@functools.cache
def _invisible() -> dict[int, None]:
    """Format characters (Cf) and combining marks (Mn, Me), to delete: none is seen as a
    character of its own. Built once, on first use (a pass over every code point)."""
    return {
        code: None
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in {"Cf", "Mn", "Me"}
    }


def _is_word_char(char: str) -> bool:
    return re.match(r"\w", char) is not None


@functools.cache
def _skeletons() -> dict[int, str]:
    """Each confusable letter or digit -> its prototype, already normalised.

    The package stores UTS #39's source -> prototype pairs in both directions. A prototype is
    never itself a source, so each group is a star: the prototype is the member linked to all
    the others. In a lone pair the direction is unknown, and either way works for matching as
    long as both members fold to one of them: the ASCII one, else the lower code point.
    """
    linked: dict[str, set[str]] = {}
    for char, entries in load_confusables("confusables.json").items():
        # The data wraps right-to-left characters in LEFT-TO-RIGHT MARKs for display.
        char = char.replace("\u200e", "")
        linked.setdefault(char, set()).update(e["c"].replace("\u200e", "") for e in entries)

    def prototype_first(char: str) -> tuple[int, bool, int, str]:
        return (-len(linked.get(char, ())), not char.isascii(), len(char), char)

    table: dict[int, str] = {}
    for char, others in linked.items():
        if len(char) != 1 or len(others) != 1:
            continue  # a prototype, or a sequence (only single code points are sources)
        (other,) = others
        prototype = min((char, other), key=prototype_first)
        if prototype == char:
            continue
        folded = unicodedata.normalize("NFKD", prototype).translate(_invisible()).casefold()
        # A symbol never becomes a letter, nor a letter a symbol: word boundaries stay put.
        if folded and all(_is_word_char(c) == _is_word_char(char) for c in folded):
            table[ord(char)] = folded
    return table


@functools.lru_cache(maxsize=4096)
def _word_matcher(word: str, may_run_on: bool) -> tuple[str, re.Pattern[str]] | None:
    """The word's first part (present in any text it matches) and its pattern; None for a
    word with nothing left to match. Cached: every battle checks every contestant's names,
    and they rarely change."""
    parts = [part for part in re.split(r"[\s_-]+", normalise(word).strip()) if part]
    if not parts:
        return None
    body = r"[\s_-]*".join(re.escape(part) for part in parts)
    end = "" if may_run_on else r"(?!\w)"
    return parts[0], re.compile(rf"(?<!\w){body}{end}")
