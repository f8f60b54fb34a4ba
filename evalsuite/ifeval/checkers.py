"""IFEval's 25 instruction checkers, one function each, by instruction id (`CHECKERS`).

Each follows the published definition (google-research `instruction_following_eval`, which
inspect_evals runs): a function of the response and the instruction's arguments (the data
set's `kwargs`). Keywords, forbidden words, section splitters and postscript markers are
matched as literal text (the field hands them to `re` as patterns; the pinned rows hold plain
words), and the field's backtracking patterns are written as linear scans.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evalsuite.ifeval.text import capital_words, language, sentence_split, word_count


class UnknownInstruction(ValueError):
    """An instruction id with no checker here: the item cannot be scored (never a pass)."""


class InstructionArgumentsError(ValueError):
    """An instruction's arguments (the data set's `kwargs`) are missing or of the wrong kind."""


@dataclass(frozen=True)
class Arguments:
    """One instruction's arguments, read with errors that name the instruction and the key."""

    instruction_id: str
    values: Mapping[str, Any]

    def _get(self, key: str) -> Any:
        value = self.values.get(key)
        if value is None:
            raise InstructionArgumentsError(
                f"IFEval instruction {self.instruction_id} needs the argument {key!r}; "
                f"its kwargs are {dict(self.values)}"
            )
        return value

    def integer(self, key: str) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise InstructionArgumentsError(
                f"IFEval instruction {self.instruction_id}: {key} is {value!r}, not an integer"
            )
        return int(value)

    def text(self, key: str) -> str:
        return str(self._get(key)).strip()

    def words(self, key: str) -> list[str]:
        value = self._get(key)
        if not isinstance(value, list | tuple):
            raise InstructionArgumentsError(
                f"IFEval instruction {self.instruction_id}: {key} is {value!r}, not a list"
            )
        return [str(word) for word in value]

    def compared(self, count: int, relation_key: str, bound_key: str) -> bool:
        """IFEval's two relations: "less than" (count < N) and "at least" (count >= N)."""
        relation, bound = self.text(relation_key), self.integer(bound_key)
        if relation == "less than":
            return count < bound
        if relation == "at least":
            return count >= bound
        raise InstructionArgumentsError(
            f"IFEval instruction {self.instruction_id}: relation {relation!r} is neither "
            "'less than' nor 'at least'"
        )


Checker = Callable[[str, Arguments], bool]


def _keywords_exist(text: str, args: Arguments) -> bool:
    lowered = text.lower()
    return all(keyword.lower() in lowered for keyword in args.words("keywords"))


def _keyword_frequency(text: str, args: Arguments) -> bool:
    # occurrences anywhere, case-insensitive, not only whole words (as the field counts)
    keyword = args.text("keyword").lower()
    return args.compared(text.lower().count(keyword), "relation", "frequency")


def _no_forbidden_words(text: str, args: Arguments) -> bool:
    return not any(
        re.search(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE)
        for word in args.words("forbidden_words")
    )


def _letter_frequency(text: str, args: Arguments) -> bool:
    letter = args.text("letter").lower()
    return args.compared(Counter(text.lower())[letter], "let_relation", "let_frequency")


def _response_language(text: str, args: Arguments) -> bool:
    detected = language(text)
    return detected is None or detected == args.text("language")  # undecidable: followed


def _sentence_count(text: str, args: Arguments) -> bool:
    return args.compared(len(sentence_split(text)), "relation", "num_sentences")


def _star_paragraph_count(text: str, args: Arguments) -> bool:
    """Paragraphs separated by `***`: an empty one first or last is not counted; an empty one
    between two others fails the instruction."""
    paragraphs = re.split(r"\s?\*\*\*\s?", text)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == args.integer("num_paragraphs")


def _word_count(text: str, args: Arguments) -> bool:
    return args.compared(word_count(text), "relation", "num_words")


def _nth_paragraph_first_word(text: str, args: Arguments) -> bool:
    """Paragraphs separated by a blank line ("\\n\\n"): their number (empty ones not counted),
    and the first word of the nth (lower case, cut at its first punctuation mark)."""
    paragraphs = text.split("\n\n")
    count = sum(1 for paragraph in paragraphs if paragraph.strip())
    nth = args.integer("nth_paragraph")
    if not 1 <= nth <= count:
        return False
    paragraph = paragraphs[nth - 1].strip()  # by position, empty ones included, as the field
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for letter in word:
        if letter in ".,?!'\"":
            break
        first += letter.lower()
    return count == args.integer("num_paragraphs") and first == args.text("first_word").lower()


def _placeholders(text: str, args: Arguments) -> bool:
    return _bracketed_spans(text) >= args.integer("num_placeholders")


def _bracketed_spans(text: str) -> int:
    """`[...]` spans within a line (the field's `\\[.*?\\]`, counted by a linear scan)."""
    count = 0
    for line in text.split("\n"):
        position = line.find("[")
        while position >= 0:
            close = line.find("]", position + 1)
            if close < 0:
                break  # no "]" after this "[" on the line: none after a later "[" either
            count += 1
            position = line.find("[", close + 1)
    return count


def _postscript(text: str, args: Arguments) -> bool:
    marker = args.text("postscript_marker")
    lowered = text.lower()
    if marker == "P.P.S":
        return re.search(r"p\.\s?p\.\s?s", lowered) is not None
    if marker == "P.S.":
        return re.search(r"p\.\s?s\.", lowered) is not None
    return marker.lower() in lowered


def _bullet_count(text: str, args: Arguments) -> bool:
    """Lines starting (after spaces) with `*` and then another character but `*`, or with
    `-`: the field's two multiline patterns, counted line by line."""
    count = 0
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("-") or (
            stripped.startswith("*") and stripped[1:2] not in ("*", "")
        ):
            count += 1
    return count == args.integer("num_bullets")


_CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _constrained_response(text: str, args: Arguments) -> bool:
    stripped = text.strip()
    return any(option in stripped for option in _CONSTRAINED_OPTIONS)


def _highlighted_sections(text: str, args: Arguments) -> bool:
    """`*text*` and `**text**` spans on one line with something besides stars and spaces in
    them, each kind counted on its own, as the field counts."""
    single = re.findall(r"\*[^\n*]*\*", text)
    double = re.findall(r"\*\*[^\n*]*\*\*", text)
    count = sum(1 for span in single if span.strip("*").strip())
    count += sum(1 for span in double if span.removeprefix("**").removesuffix("**").strip())
    return count >= args.integer("num_highlights")


def _multiple_sections(text: str, args: Arguments) -> bool:
    splitter = re.escape(args.text("section_spliter"))
    sections = re.split(rf"\s?{splitter}\s?\d+\s?", text)
    return len(sections) - 1 >= args.integer("num_sections")


def _json_format(text: str, args: Arguments) -> bool:
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        if body.startswith(fence):
            body = body.removeprefix(fence)
            break
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # nested past the parser's depth: not taken as JSON
        return False
    return True


def _title(text: str, args: Arguments) -> bool:
    """A `<<title>>` on one line with something in it (the field's `<<[^\\n]+>>`: greedy, so
    from a line's first `<<` to its last `>>`)."""
    for line in text.split("\n"):
        opening, closing = line.find("<<"), line.rfind(">>")
        title = line[opening : closing + 2] if 0 <= opening <= closing - 3 else ""
        if title.lstrip("<").rstrip(">").strip():
            return True
    return False


def _two_responses(text: str, args: Arguments) -> bool:
    responses = text.split("******")
    kept = []
    for index, response in enumerate(responses):
        if response.strip():
            kept.append(response)
        elif index not in (0, len(responses) - 1):
            return False
    return len(kept) == 2 and kept[0].strip() != kept[1].strip()


def _repeat_prompt(text: str, args: Arguments) -> bool:
    return text.strip().lower().startswith(args.text("prompt_to_repeat").lower())


def _end_phrase(text: str, args: Arguments) -> bool:
    return text.strip().strip('"').lower().endswith(args.text("end_phrase").lower())


def _quotation(text: str, args: Arguments) -> bool:
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'


def _capital_word_frequency(text: str, args: Arguments) -> bool:
    return args.compared(capital_words(text), "capital_relation", "capital_frequency")


def _english_capital(text: str, args: Arguments) -> bool:
    return text.isupper() and language(text) in ("en", None)


def _english_lowercase(text: str, args: Arguments) -> bool:
    return text.islower() and language(text) in ("en", None)


def _no_comma(text: str, args: Arguments) -> bool:
    return "," not in text


# The published registry's 25 instruction ids (instructions_registry.INSTRUCTION_DICT).
CHECKERS: dict[str, Checker] = {
    "keywords:existence": _keywords_exist,
    "keywords:frequency": _keyword_frequency,
    "keywords:forbidden_words": _no_forbidden_words,
    "keywords:letter_frequency": _letter_frequency,
    "language:response_language": _response_language,
    "length_constraints:number_sentences": _sentence_count,
    "length_constraints:number_paragraphs": _star_paragraph_count,
    "length_constraints:number_words": _word_count,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph_first_word,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullet_count,
    "detectable_format:constrained_response": _constrained_response,
    "detectable_format:number_highlighted_sections": _highlighted_sections,
    "detectable_format:multiple_sections": _multiple_sections,
    "detectable_format:json_format": _json_format,
    "detectable_format:title": _title,
    "combination:two_responses": _two_responses,
    "combination:repeat_prompt": _repeat_prompt,
    "startend:end_checker": _end_phrase,
    "startend:quotation": _quotation,
    "change_case:capital_word_frequency": _capital_word_frequency,
    "change_case:english_capital": _english_capital,
    "change_case:english_lowercase": _english_lowercase,
    "punctuation:no_comma": _no_comma,
}
