"""BIG-Bench Hard (Suzgun et al., 2022, arXiv:2210.09261) on `Joschka/big_bench_hard`, the
mirror inspect_evals' `bbh` task reads: 27 subsets, one config each (its split named as the
config), plus a `few_shot_prompts` config holding each subset's three-shot prompts.

inspect_evals sorts the subsets into answer kinds, and so does this module:
- "multiple_choice" (17 subsets): lettered options; the target is the option's letter;
- "binary" (6): a one-word answer from a fixed pair (True/False, Yes/No, valid/invalid);
- "exact" (4): a free answer compared as a whole: an integer (multistep_arithmetic_two,
  object_counting), a space-separated word list (word_sorting), a run of closing brackets
  (dyck_languages, which inspect_evals treats as a fourth kind and scores as the exact ones).

A row carries no subset name, so the set is read file by file (`hub.records_by_file`) and the
subset is the file's config folder. Model answers are hostile text: nothing here runs a regex
that can backtrack on it, and the committed answer is cut to `MAX_ANSWER_CHARS` first.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from evalsuite.items import CHOICE_LETTERS, SampleItem

Record = dict[str, Any]
AnswerKind = Literal["multiple_choice", "binary", "exact"]

MULTIPLE_CHOICE_SUBSETS = (
    "date_understanding",
    "disambiguation_qa",
    "geometric_shapes",
    "hyperbaton",
    "logical_deduction_five_objects",
    "logical_deduction_seven_objects",
    "logical_deduction_three_objects",
    "movie_recommendation",
    "penguins_in_a_table",
    "reasoning_about_colored_objects",
    "ruin_names",
    "salient_translation_error_detection",
    "snarks",
    "temporal_sequences",
    "tracking_shuffled_objects_five_objects",
    "tracking_shuffled_objects_seven_objects",
    "tracking_shuffled_objects_three_objects",
)
BINARY_SUBSETS = (
    "boolean_expressions",
    "causal_judgement",
    "formal_fallacies",
    "navigate",
    "sports_understanding",
    "web_of_lies",
)
EXACT_SUBSETS = ("multistep_arithmetic_two", "object_counting", "word_sorting", "dyck_languages")
SUBSETS = MULTIPLE_CHOICE_SUBSETS + BINARY_SUBSETS + EXACT_SUBSETS
FEW_SHOT_CONFIG = "few_shot_prompts"
ANSWER_KINDS: tuple[AnswerKind, ...] = ("multiple_choice", "binary", "exact")

# Two ruin_names rows have their options split on commas inside the candidate names, so no
# option is the answer (suzgunmirac/BIG-Bench-Hard#19); inspect_evals drops the same two,
# by their 1-based position in the subset.
KNOWN_BROKEN = frozenset({("ruin_names", 100), ("ruin_names", 145)})

# inspect_evals puts this before the few-shot prompt of every subset that is not multiple
# choice (its options say nothing of the answer's form); the wording here is ours.
_ANSWER_FORMS = {
    "word_sorting": "the words, sorted, separated by spaces",
    "web_of_lies": "Yes or No",
}
_ANSWER_LINE_HINT = (
    "End your reply with a last line of the form 'ANSWER: {form}'; you may reason on the "
    "lines before it.\n\n"
)

MAX_ANSWER_CHARS = 2000
_ANSWER_MARK = re.compile(r"ANSWER\s*[:：]", re.IGNORECASE)
_ANSWER_IS = re.compile(r"the answer is\b", re.IGNORECASE)
_BRACKETS = frozenset("()[]{}<>")
_OUTER_PUNCTUATION = string.punctuation.replace("-", "")  # "-25" keeps its sign


def answer_kind(subset: str) -> AnswerKind:
    if subset in MULTIPLE_CHOICE_SUBSETS:
        return "multiple_choice"
    if subset in BINARY_SUBSETS:
        return "binary"
    if subset in EXACT_SUBSETS:
        return "exact"
    raise ValueError(f"bbh: {subset!r} is not one of the 27 BIG-Bench Hard subsets")


def hub_files() -> tuple[str, ...]:
    """The files to read, in the repository's layout: a folder per config, its split's shards
    named after the split (which is named after the config)."""
    return tuple(f"{name}/{name}-*.parquet" for name in (*SUBSETS, FEW_SHOT_CONFIG))


def items(files: Mapping[str, list[Record]]) -> list[SampleItem]:
    """Every scorable item of the 27 subsets, in subset order, from the rows of each file
    (keyed by its path in the repository). Each item is shown after its subset's three-shot
    chain-of-thought prompt (`SampleItem.preamble`)."""
    by_config: dict[str, list[Record]] = {}
    for path, rows in sorted(files.items()):
        by_config.setdefault(path.split("/", 1)[0], []).extend(rows)
    prompts = {
        str(row["dataset_name"]): str(row["chain_of_thought_prompt"])
        for row in by_config.get(FEW_SHOT_CONFIG, [])
    }
    converted = []
    for subset in SUBSETS:
        if subset not in prompts:
            raise ValueError(f"bbh: the {FEW_SHOT_CONFIG} config has no prompt for {subset}")
        preamble = _preamble(subset, prompts[subset])
        for position, row in enumerate(by_config.get(subset, []), start=1):
            if (subset, position) not in KNOWN_BROKEN:
                converted.append(_item(subset, position, row, preamble))
    return converted


def _preamble(subset: str, few_shot: str) -> str:
    if answer_kind(subset) == "multiple_choice":
        return f"{few_shot}\n\n"
    hint = _ANSWER_LINE_HINT.format(form=_ANSWER_FORMS.get(subset, "<one-word answer>"))
    return f"{hint}{few_shot}\n\n"


def _item(subset: str, position: int, row: Record, preamble: str) -> SampleItem:
    kind = answer_kind(subset)
    question = str(row["question"])
    target = str(row["target"]).strip()  # formal_fallacies' targets carry a leading space
    choices: tuple[str, ...] = ()
    if kind == "multiple_choice":
        choices = tuple(str(text) for text in row["choices"]["text"])
        target = _choice_letter(subset, position, target, choices)
    return SampleItem(
        id=f"{subset}:{position:03d}",  # inspect_evals' id is f"{subset}_{position:03d}"
        input=f"Q: {question}",
        target=target,
        choices=choices,
        metadata={"subset": subset, "answer_kind": kind, "target": target},
        preamble=preamble,
    )


def _choice_letter(subset: str, position: int, target: str, choices: tuple[str, ...]) -> str:
    """The target's letter: the set writes "A" (or "(A)"); one past the options is an error."""
    letter = target.strip("() ").upper()
    if len(letter) == 1 and letter in CHOICE_LETTERS[: len(choices)]:
        return letter
    raise ValueError(
        f"bbh {subset} row {position}: target {target!r} names none of its {len(choices)} "
        "options; add the row to bbh.KNOWN_BROKEN if the published row is broken"
    )


def committed_answer(text: str) -> str | None:
    """What a reply commits to: the rest of the line after its last "ANSWER:" (inspect_evals'
    form), else after its last "the answer is" (the form of the set's chain-of-thought
    exemplars); None when it has neither."""
    marks = list(_ANSWER_MARK.finditer(text)) or list(_ANSWER_IS.finditer(text))
    if not marks:
        return None
    rest = text[marks[-1].end() : marks[-1].end() + MAX_ANSWER_CHARS]
    return rest.split("\n", 1)[0].strip()


def answer_correct(text: str, target: str, kind: str, n_choices: int = 0) -> bool:
    """Whether the reply's committed answer is the target, as inspect_evals scores the kind:
    the option letter (its `choice()`); the one word, ignoring case (its `answer("word")`);
    the whole answer (its `match()`), here compared exactly rather than as a suffix."""
    answer = committed_answer(text)
    if answer is None:
        return False
    if kind == "multiple_choice":
        return _letter(answer, n_choices) == target
    if kind == "binary":
        words = answer.strip(string.punctuation + string.whitespace).split()
        return len(words) == 1 and words[0].casefold() == target.casefold()
    if kind == "exact":
        return _exact_form(answer) == _exact_form(target)
    raise ValueError(f"bbh: no answer kind {kind!r}")


def _letter(answer: str, n_choices: int) -> str | None:
    """The option letter an answer starts with: "B", "(B)", "B)" or "B." (not "Because")."""
    head = answer.lstrip("(*[ ")
    if not head or head[0].upper() not in CHOICE_LETTERS[:n_choices]:
        return None
    if len(head) > 1 and head[1].isalnum():
        return None
    return head[0].upper()


def _exact_form(answer: str) -> str:
    """A free answer compared as a whole: without case, the commas and outer punctuation
    around it, with single spaces; a bracket run keeps its brackets, without spaces."""
    plain = answer.strip().removesuffix(".").strip()
    if plain and set(plain) <= _BRACKETS | {" "}:
        return plain.replace(" ", "")
    words = plain.casefold().replace(",", " ").split()
    return " ".join(words).strip(_OUTER_PUNCTUATION)


def accuracy_by_kind(answers: Sequence[tuple[Mapping[str, Any], str]]) -> dict[str, list[float]]:
    """Per answer kind, the 0/1 correctness of each (item metadata, reply) pair."""
    values: dict[str, list[float]] = {}
    for metadata, completion in answers:
        kind = str(metadata["answer_kind"])
        correct = answer_correct(
            completion, str(metadata["target"]), kind, int(metadata.get("n_choices", 0))
        )
        values.setdefault(kind, []).append(float(correct))
    return values
