"""Category tags of a battle's prompt, as Chatbot Arena splits its leaderboard.

`Categorizer` is the interface: a prompt (and how many user turns the battle had) in, a
`PromptCategories` out. `RuleCategorizer` is the default and the one on the hot path (a battle's
tags are computed once, when it is created): regular expressions, a token count and langdetect,
a few milliseconds at most. What rules cannot decide — Arena-Hard's seven criteria of a hard
prompt, and creative writing beyond the plain "write a poem" — an optional judge decides
(`category_judge.JudgeCategorizer`), run later by `manage.py battles categorize`.

Pure Python: no Django here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

import langdetect
from langdetect.lang_detect_exception import LangDetectException

from arena.battles.style import count_tokens

# langdetect samples its features at random: a fixed seed gives one answer per text.
langdetect.DetectorFactory.seed = 0

CODING = "coding"
MATH = "math"
CREATIVE_WRITING = "creative_writing"
INSTRUCTION_FOLLOWING = "instruction_following"
LONG_QUERY = "long_query"
MULTI_TURN = "multi_turn"
NON_ENGLISH = "non_english"
HARD = "hard"
CATEGORIES = (
    CODING,
    MATH,
    CREATIVE_WRITING,
    INSTRUCTION_FOLLOWING,
    LONG_QUERY,
    MULTI_TURN,
    NON_ENGLISH,
    HARD,
)
LABELS = {
    CODING: "Coding",
    MATH: "Math",
    CREATIVE_WRITING: "Creative writing",
    INSTRUCTION_FOLLOWING: "Instruction following",
    LONG_QUERY: "Long query",
    MULTI_TURN: "Multi-turn",
    NON_ENGLISH: "Non-English",
    HARD: "Hard prompts",
}
# Chatbot Arena's "long user query": at least 500 tokens (counted as the export counts them).
LONG_QUERY_TOKENS = 500
# Arena-Hard's criteria (Li et al., "From Crowdsourced Data to High-Quality Benchmarks", 2024);
# Chatbot Arena's "hard prompts" category takes prompts meeting at least 6 of the 7.
HARD_CRITERIA = (
    "specificity",
    "domain_knowledge",
    "complexity",
    "problem_solving",
    "creativity",
    "technical_accuracy",
    "real_world",
)
HARD_MIN_CRITERIA = 6
# Rules read at most this much of a prompt (the arena's own limit is far larger in tests):
# every pattern below is linear, and a bound keeps even that small.
RULES_READ_CHARS = 20_000
LANGUAGE_READ_CHARS = 2_000
# langdetect's probability needed to name a language: on a short English prompt it may lean
# elsewhere ("Write a haiku about autumn rain." is 57 % Finnish to it), and an unsure call is
# better left unknown than put on the non-English board.
LANGUAGE_MIN_PROBABILITY = 0.9


@dataclass(frozen=True)
class PromptCategories:
    tags: frozenset[str]
    language: str = ""  # langdetect's code ("fr", "zh-cn"); "" when it cannot tell
    # Arena-Hard's criteria as a judge answered them; empty when no judge has read the prompt.
    criteria: dict[str, bool] = field(default_factory=dict)


class Categorizer(Protocol):
    name: str

    def categorize(self, prompt: str, *, user_turns: int = 1) -> PromptCategories: ...


def categories_encode(tags: frozenset[str] | set[str]) -> str:
    """The stored form: ",coding,math," (sorted), so one category is the plain substring
    ",name," on every database; "" for none."""
    return f",{','.join(sorted(tags))}," if tags else ""


def categories_decode(stored: str) -> list[str]:
    return [tag for tag in stored.split(",") if tag]


def is_hard(criteria: dict[str, bool]) -> bool:
    return sum(bool(criteria.get(name)) for name in HARD_CRITERIA) >= HARD_MIN_CRITERIA


def multi_turn(user_turns: int) -> bool:
    return user_turns > 1


# Every pattern anchored to a line start (MULTILINE) or meant for one line spells its
# spacing as `[ \t]`, never `\s`: `\s` matches newlines, so `^\s*` let each of n blank lines
# scan all the blank lines after it (quadratic: 20 s of CPU for "\t \n" * 7,000).
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)", re.MULTILINE)
_CODE_LINE = re.compile(
    r"^[ \t]*(def \w+\(|class \w+[:(]|import \w|from [\w.]+ import |#include[ \t]*<|"
    r"(public|private|static)[ \t]+\w+.*\(|function[ \t]*\w*[ \t]*\(|"
    r"(const|let|var)[ \t]+\w+[ \t]*=|"
    r"console\.log\(|print\(|System\.out\.|fn \w+\(|func \w+\(|SELECT .+ FROM |"
    r"<(div|html|script|body)\b|\$ \w+|\w+[ \t]*=[ \t]*\w+\(.*\)[ \t]*;?[ \t]*$)",
    re.MULTILINE | re.IGNORECASE,
)
_LANGUAGES = (
    r"python|javascript|typescript|java|c\+\+|c#|golang|rust|kotlin|swift|ruby|php|perl|"
    r"scala|haskell|sql|bash|powershell|html|css|react|django|numpy|pandas|regex|json|yaml|"
    r"docker|kubernetes|git|linux|matlab|latex|verilog|assembly|lua|dart|r script"
)
_CODE_WORDS = (
    r"code|function|script|program|bug|debug|compile|compiler|error|exception|stack trace|"
    r"api|class|method|variable|loop|algorithm|implement|refactor|unit test|library|"
    r"endpoint|query|snippet|syntax|runtime"
)
_LANGUAGE_WORD = re.compile(rf"(?<![\w+#])({_LANGUAGES})(?![\w+#])", re.IGNORECASE)
_CODE_WORD = re.compile(rf"\b({_CODE_WORDS})s?\b", re.IGNORECASE)
# Inline code: a span of at most 200 characters between backticks, then a look for code
# punctuation inside it (one pattern for both backtracks quadratically on "`" + "." * n).
_INLINE_SPAN = re.compile(r"`([^`\n]{1,200})`")
_CODE_PUNCTUATION = re.compile(r"\(\)|[=.;{}\[\]<>]|::|->")
INLINE_SPANS_READ = 100

_LATEX = re.compile(
    r"\\(frac|int|sum|prod|sqrt|lim|infty|alpha|beta|theta|pi|sigma|cdot|times|leq|geq|"
    r"neq|partial|mathbb|binom|log|sin|cos|tan)\b|\$[^$\n]+\$"
)
_MATH_SYMBOL = re.compile(r"[∫∑∏√π∞≤≥≠±∂∆∇∈∀∃⊂⊆∪∩]")
_EQUATION = re.compile(
    r"(\d|\b[a-z]\b)[ \t]*(\^|\*\*)[ \t]*\d|"  # powers: x^2, 3**4
    r"\b\d+(\.\d+)?[ \t]*[-+*/×÷][ \t]*\d+(\.\d+)?[ \t]*(=|\?|$)|"  # arithmetic: 12 * 34 =
    r"\b\d*[a-z][ \t]*[-+][ \t]*\d+[ \t]*=[ \t]*-?\d+|"  # linear equations: 2x + 3 = 7
    r"\b[a-z][ \t]*\([ \t]*[a-z][ \t]*\)[ \t]*=",  # f(x) =
    re.IGNORECASE | re.MULTILINE,
)
_MATH_WORDS = re.compile(
    r"\b(solve|equation|integral|integrate|derivative|differentiate|probability|"
    r"theorem|prove|proof|lemma|matrix|eigenvalues?|polynomial|factori[sz]e|calculate|"
    r"compute|arithmetic|algebra|geometry|calculus|triangle|logarithm|prime numbers?|"
    r"how many|what is the (sum|product|value)|expected value|variance)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d")

_CREATIVE = re.compile(
    r"\b(write|compose|draft|create|tell|make up|invent|give me)\b[^.?!\n]{0,60}?"
    r"\b(poems?|stor(y|ies)|short story|song|lyrics|haiku|limerick|sonnet|ballad|rap|fable|"
    r"fairy tale|screenplay|play|scene|dialogue|monologue|novel|chapter|fan ?fiction|joke|"
    r"riddle|verse|rhymes?|tale|slogan|toast|eulogy)\b",
    re.IGNORECASE,
)

_CONSTRAINT = re.compile(
    r"\b(in|under|within|at most|at least|no more than|fewer than|less than|exactly|"
    r"maximum of|minimum of|limit (it )?to)\s+(\d+|one|two|three|four|five|six|seven|eight|"
    r"nine|ten|twenty|fifty|a hundred)\s+(words?|sentences?|paragraphs?|bullet points?|"
    r"bullets|lines?|characters?|items?|sections?|steps?)\b|"
    r"\b(in|as|using|use|return|respond in|answer in|output in|format(ted)? (as|in))\s+"
    r"(valid\s+)?(json|yaml|xml|csv|a table|markdown table|a bulleted list|a numbered list|"
    r"bullet points|all (lower|upper) ?case|lower ?case|upper ?case|capital letters)\b|"
    r"\b(do not|don't|never|without) (use|using|mention|include|say)\b|"
    r"\b(start|begin|end|finish)\w* (your (answer|response|reply) )?with\b|"
    r"\b(only|just) (answer|respond|reply|output|return)\b|"
    r"\b(wrap|enclose|surround)\w* (your|the|each)\b[^.\n]{0,30}\b(quotes|quotation marks|"
    r"brackets|tags)\b|"
    r"\b(include|use) the (key)?words?\b|"
    r"\bno (commas|capital letters|punctuation)\b",
    re.IGNORECASE,
)


class RuleCategorizer:
    """Deterministic rules: the default, cheap enough for the moment a battle is created.
    Tags it cannot decide (hard) it leaves out; `creative_writing` it gives only to plain
    requests for a poem, story, song and the like."""

    name = "rules"

    def categorize(self, prompt: str, *, user_turns: int = 1) -> PromptCategories:
        text = prompt[:RULES_READ_CHARS]
        tags: set[str] = set()
        if is_coding(text):
            tags.add(CODING)
        if is_math(text):
            tags.add(MATH)
        if _CREATIVE.search(text):
            tags.add(CREATIVE_WRITING)
        if _CONSTRAINT.search(text):
            tags.add(INSTRUCTION_FOLLOWING)
        # Counting stops at the limit: a huge prompt is long however long it is.
        if count_tokens(prompt[: LONG_QUERY_TOKENS * 40]) >= LONG_QUERY_TOKENS:
            tags.add(LONG_QUERY)
        if multi_turn(user_turns):
            tags.add(MULTI_TURN)
        language = detect_language(text)
        if language and language != "en":
            tags.add(NON_ENGLISH)
        return PromptCategories(frozenset(tags), language)


def is_coding(text: str) -> bool:
    if _FENCE.search(text) or _inline_code(text):
        return True
    if _CODE_LINE.search(text) and _CODE_WORD.search(text):
        return True
    return bool(_LANGUAGE_WORD.search(text) and _CODE_WORD.search(text))


def _inline_code(text: str) -> bool:
    for i, span in enumerate(_INLINE_SPAN.finditer(text)):
        if i >= INLINE_SPANS_READ:
            return False
        if _CODE_PUNCTUATION.search(span.group(1)):
            return True
    return False


def is_math(text: str) -> bool:
    if _LATEX.search(text) or _MATH_SYMBOL.search(text) or _EQUATION.search(text):
        return True
    return bool(_MATH_WORDS.search(text) and _NUMBER.search(text))


# Plain ASCII with at least two of these words is English without asking langdetect (about
# 10 ms a prompt on this machine, most of the rules' cost on the hot path).
_ENGLISH_WORDS = frozenset(
    [
        "the",
        "is",
        "are",
        "what",
        "how",
        "why",
        "and",
        "of",
        "you",
        "your",
        "with",
        "this",
        "that",
        "for",
        "does",
        "can",
        "my",
        "from",
        "which",
        "there",
        "their",
        "would",
        "should",
        "could",
        "about",
    ]
)


def detect_language(text: str) -> str:
    """langdetect's code for the text, or "" when the text is too short to tell (under three
    words of letters: "hi", "ok?"), has no letters at all, or langdetect is unsure."""
    sample = text[:LANGUAGE_READ_CHARS]
    if sample.isascii() and len(_ENGLISH_WORDS.intersection(sample.lower().split())) >= 2:
        return "en"
    if len(re.findall(r"[^\W\d_]{2,}", sample)) < 3 and not re.search(
        r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", sample
    ):
        return ""
    try:
        best = langdetect.detect_langs(sample)[0]
    except LangDetectException:
        return ""
    return best.lang if best.prob >= LANGUAGE_MIN_PROBABILITY else ""
