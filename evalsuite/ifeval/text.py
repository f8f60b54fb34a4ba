"""Counting for IFEval's checkers: words, sentences, capital words, the language of a text.

The field counts sentences with nltk's punkt and tokens with nltk's `word_tokenize`; punkt's
model is data that cannot be downloaded here, so both are approximated below (the differences
are said in the evalsuite README). All of it is linear in the text: answers are
agent-controlled.
"""

from __future__ import annotations

import re

import langdetect
from langdetect.lang_detect_exception import LangDetectException

# langdetect samples its features at random; a fixed seed gives one language per text, so a
# rerun scores the same (the field leaves it unseeded)
langdetect.DetectorFactory.seed = 0

_WORD = re.compile(r"\w+")
# a sentence ends at a run of . ! ? (closing quotes or brackets after it) before a space
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]\u201d\u2019]*(?=\s|\Z)")
# tokens that end in a period without ending a sentence (punkt's pretrained English model
# learns such a list; this is the common part of it)
_ABBREVIATIONS = frozenset(
    ("mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "cf", "inc",
     "ltd", "co", "corp", "no", "nos", "fig", "al", "approx", "dept", "est", "gov", "ave", "mt",
     "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
     "a.m", "p.m", "u.s", "u.k")
)  # fmt: skip


def word_count(text: str) -> int:
    """Runs of word characters, as the field's `RegexpTokenizer(r"\\w+")` counts them."""
    return sum(1 for _ in _WORD.finditer(text))


def sentence_split(text: str) -> list[str]:
    """The text's sentences, for IFEval's sentence counts.

    The field uses nltk's punkt (pretrained English). This splitter follows its main rules:
    a sentence ends at `.`, `!` or `?` (any run of them, closing quotes and brackets after it)
    followed by whitespace or the end; not after a common abbreviation ("Dr.", "e.g.") or a
    single-letter initial ("J. K."); after an ellipsis only when the next word is capitalised.
    A line break alone ends no sentence (a list without full stops is one sentence, as in
    punkt). It does not learn abbreviations or use punkt's orthographic statistics, so it can
    differ on rare abbreviations and on numbered lists."""
    pieces: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        mark = end.group()
        if mark.startswith(".") and not mark.startswith("..") and _ends_abbreviation(text, end):
            continue
        if mark.startswith("..") and not _next_word_capitalised(text, end.end()):
            continue
        pieces.append(text[start : end.end()])
        start = end.end()
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


def _ends_abbreviation(text: str, end: re.Match[str]) -> bool:
    begin = end.start()
    # back to the token's start: linear overall, as every match ends a different token
    while begin > 0 and not text[begin - 1].isspace():
        begin -= 1
    token = text[begin : end.start()].lstrip("\"'([\u201c\u2018").lower()
    if len(token) == 1 and token.isalpha():
        return True  # an initial
    return token in _ABBREVIATIONS


def _next_word_capitalised(text: str, position: int) -> bool:
    rest = text[position : position + 64].lstrip()
    return bool(rest) and rest[0].isupper()


def capital_words(text: str) -> int:
    """Words in capitals, as the field counts tokens of nltk's `word_tokenize` that are
    `isupper()`. Here a token is a whitespace-separated word, split before each apostrophe
    ("DON'T" is "DON" and "'T", as word_tokenize splits contractions); punctuation attached to
    a word does not change `isupper()`, so the counts agree except where word_tokenize splits
    words that no space separates."""
    count = 0
    for word in text.split():
        for part in re.split(r"(?=['\u2019])", word):
            count += part.isupper()
    return count


def language(text: str) -> str | None:
    """langdetect's language code for the text; None when it finds no features to judge
    (langdetect reads at most its first 10,000 characters)."""
    try:
        return langdetect.detect(text)
    except LangDetectException:
        return None
